package ticket

import "strings"

// MaxFingerprintLen bounds a fingerprint, in bytes: it is a caller's name
// for a problem ("checkout-500", a hash of a stack trace), stored with
// every report of it and shown in the occurrence comments.
const MaxFingerprintLen = 255

// ValidateFingerprint checks a create's optional fingerprint: "" (none),
// or at most MaxFingerprintLen bytes of valid UTF-8 on one line, without
// control or invisible characters (two fingerprints that read alike must
// be alike), not only spaces. It is compared byte for byte, never
// normalized: a fingerprint is an identity, as a request id is.
func ValidateFingerprint(fp string) error {
	if fp == "" {
		return nil
	}
	if len(fp) > MaxFingerprintLen {
		return invalid("fingerprint", "is %d bytes long; at most %d are allowed", len(fp), MaxFingerprintLen)
	}
	if err := checkText("fingerprint", fp, 0, false); err != nil {
		return err
	}
	for _, r := range fp {
		if r != ' ' {
			return nil
		}
	}
	return invalid("fingerprint", "is only spaces: leave it out, or name the problem")
}

// Defuse returns s with every ReservedTitleMarker (in any case) broken by
// a space after its bracket: text a caller wrote for a create's body may
// hold it, and the occurrence comment that quotes it must not pass for
// another request's delivery.
func Defuse(s string) string {
	var b strings.Builder
	for {
		i := indexFold(s, ReservedTitleMarker)
		if i < 0 {
			break
		}
		b.WriteString(s[:i+1])
		b.WriteByte(' ')
		s = s[i+1:]
	}
	if b.Len() == 0 {
		return s
	}
	b.WriteString(s)
	return b.String()
}
