package jsonscan_test

import (
	"strings"
	"testing"

	"ticketrelay/internal/jsonscan"
)

// TestMembers: names come as sent (case, escapes decoded, repeats kept),
// values as raw bytes, in order; a value that is not an object has none.
func TestMembers(t *testing.T) {
	var got []string
	jsonscan.Members([]byte(` { "a" : 1 , "A":"x,}" ,"\u0062":{"c":[1,{"d":2}]}, "a":null } `), func(name string, v []byte) bool {
		got = append(got, name+"="+string(v))
		return true
	})
	if want := `a=1|A="x,}"|b={"c":[1,{"d":2}]}|a=null`; strings.Join(got, "|") != want {
		t.Errorf("members %q, want %q", strings.Join(got, "|"), want)
	}
	n := 0
	jsonscan.Members([]byte(`[{"a":1}]`), func(string, []byte) bool { n++; return true })
	jsonscan.Members([]byte(`{"a":1,"b":2}`), func(string, []byte) bool { n++; return false })
	if n != 1 {
		t.Errorf("%d members seen of an array and of an object stopped at its first, want 1", n)
	}
}

// TestDuplicate: the first name given twice, names compared exactly; the
// members before it are handed on.
func TestDuplicate(t *testing.T) {
	for _, c := range []struct{ in, dup, seen string }{
		{`{"a":1,"b":2}`, "", "ab"},
		{`{"a":1,"b":2,"a":3,"b":4}`, "a", "ab"},
		{`{"title":1,"Title":2}`, "", "titleTitle"},
		{`{"\u0061":1,"a":2}`, "a", "a"},
	} {
		var seen strings.Builder
		if dup := jsonscan.Duplicate([]byte(c.in), func(name string, _ []byte) { seen.WriteString(name) }); dup != c.dup || seen.String() != c.seen {
			t.Errorf("%s: duplicate %q after %q, want %q after %q", c.in, dup, seen.String(), c.dup, c.seen)
		}
	}
	if got := jsonscan.DecodeString([]byte(`"a\"b"`)); got != `a"b` {
		t.Errorf("DecodeString = %q", got)
	}
}
