package json

// Tests of ticketrelay's patch (see ../README.md): the decoder's first
// buffer is sized to a reader that knows its length.

import (
	"bytes"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// lenless hides a reader's Len method, so the decoder takes the unpatched
// path.
type lenless struct{ r io.Reader }

func (l lenless) Read(p []byte) (int, error) { return l.r.Read(p) }

func TestFirstBufferSize(t *testing.T) {
	consumed := bytes.NewReader(make([]byte, 10000))
	if _, err := consumed.Read(make([]byte, 3000)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		r    io.Reader
		want int
	}{
		{"small bytes.Reader", bytes.NewReader([]byte(`{"a":1}`)), 7},
		{"empty", bytes.NewReader(nil), 1},
		{"large strings.Reader", strings.NewReader(strings.Repeat("x", 100000)), 100000},
		{"bytes.Buffer", bytes.NewBufferString(strings.Repeat("x", 5000)), 5000},
		{"partly read", consumed, 7000},
		{"no Len", lenless{bytes.NewReader(nil)}, minBufferSize},
	} {
		if got := firstBufferSize(c.r); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

// TestSizedDecodeMatchesUnsized decodes documents around every buffer
// boundary, alone, several in a row, truncated and surrounded by spaces,
// through a reader with Len and through the same bytes without it: the
// values and errors must be the same.
func TestSizedDecodeMatchesUnsized(t *testing.T) {
	doc := func(n int) string { // a JSON object of exactly n bytes (n >= 12)
		return `{"s":"` + strings.Repeat("é", (n-8)/2) + strings.Repeat("x", (n-8)%2) + `"}`
	}
	inputs := []string{"", "  ", "7", " [1, 2] "}
	for _, n := range []int{12, 100, 4095, 4096, 4097, 8193, 32767, 32768, 32769, 100000} {
		d := doc(n)
		if len(d) != n {
			t.Fatalf("doc(%d) has %d bytes", n, len(d))
		}
		inputs = append(inputs, d, d+" "+doc(300)+"\n"+d, d[:n-1], " \n "+d+" x", d+" ")
	}
	decodeAll := func(r io.Reader) (vals []any, err error) {
		dec := NewDecoder(r)
		for {
			var v any
			if err := dec.Decode(&v); err != nil {
				return vals, err
			}
			vals = append(vals, v)
		}
	}
	values := 0
	for i, in := range inputs {
		got, gotErr := decodeAll(bytes.NewReader([]byte(in)))
		want, wantErr := decodeAll(lenless{strings.NewReader(in)})
		if !reflect.DeepEqual(got, want) {
			t.Errorf("input %d (%d bytes): %d values, want %d", i, len(in), len(got), len(want))
		}
		if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
			t.Errorf("input %d (%d bytes): error %v, want %v", i, len(in), gotErr, wantErr)
		}
		values += len(want)
	}
	// Per size: 1 + 3 + 0 (truncated) + 1 (then the error) + 1; and "7", [1, 2].
	if want := 10*6 + 2; values != want {
		t.Fatalf("the inputs decoded to %d values on the unpatched path, want %d", values, want)
	}
}

// TestSizedBufferKeepsReading decodes from a bytes.Buffer that gets more
// data after each value: the first buffer, sized to the first value, must
// grow for the later, larger ones.
func TestSizedBufferKeepsReading(t *testing.T) {
	var b bytes.Buffer
	dec := NewDecoder(&b)
	for _, n := range []int{1, 10, 5000, 3, 70000} {
		want := strings.Repeat("y", n)
		b.WriteString(`"` + want + `" `)
		var got string
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("value of %d bytes: %v", n, err)
		}
		if got != want {
			t.Fatalf("value of %d bytes decoded as %d bytes", n, len(got))
		}
	}
	var v any
	if err := dec.Decode(&v); err != io.EOF {
		t.Fatalf("after the last value: %v, %v; want io.EOF", v, err)
	}
}

// TestSmallDecodeAllocates checks the point of the patch: decoding a small
// document from memory no longer allocates a 32 KiB buffer.
func TestSmallDecodeAllocates(t *testing.T) {
	body := []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"create_ticket","arguments":{"request_id":"r-1","title":"disk full"}}}`)
	perDecode := func(wrap func(io.Reader) io.Reader) uint64 {
		const n = 200
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range n {
			var v map[string]any
			if err := NewDecoder(wrap(bytes.NewReader(body))).Decode(&v); err != nil {
				t.Fatal(err)
			}
		}
		runtime.ReadMemStats(&after)
		return (after.TotalAlloc - before.TotalAlloc) / n
	}
	sized := perDecode(func(r io.Reader) io.Reader { return r })
	unsized := perDecode(func(r io.Reader) io.Reader { return lenless{r} })
	if unsized < minBufferSize {
		t.Fatalf("the unpatched path allocates %d bytes per decode, below %d: the test measures nothing", unsized, minBufferSize)
	}
	// The patch saves the 32 KiB buffer less the document-sized one it
	// allocates instead; the decoded map costs the same on both paths.
	if saved := int64(unsized) - int64(sized); saved < minBufferSize-1024 {
		t.Errorf("a %d-byte document allocates %d bytes per decode, %d fewer than the unpatched path", len(body), sized, saved)
	}
	t.Logf("bytes allocated per decode: %d sized, %d unsized", sized, unsized)
}
