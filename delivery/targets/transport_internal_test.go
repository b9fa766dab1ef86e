package targets

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// The target's transport negotiates HTTP/2 where the API offers it (TLS
// ALPN): a custom dialer alone would leave it on HTTP/1.1.
func TestTransportNegotiatesHTTP2(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Proto", r.Proto)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	tr := newTransport("api", 4, nil)
	tr.TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	t.Cleanup(tr.CloseIdleConnections)
	resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.Header.Get("X-Proto") != "HTTP/2.0" {
		t.Fatalf("answered over %s (server saw %s), want HTTP/2", resp.Proto, resp.Header.Get("X-Proto"))
	}
}
