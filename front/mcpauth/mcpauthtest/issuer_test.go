package mcpauthtest_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"ticketrelay/front/mcpauth/mcpauthtest"
)

// The issuer's metadata offers client registration, and its endpoint
// answers as RFC 7591 says: 201 with a client_id and the metadata echoed
// (a secret only for a client that authenticates), 400 with the error code
// for metadata it cannot register, and nothing registered then.
func TestIssuerRegistersClients(t *testing.T) {
	is := mcpauthtest.NewIssuer(t)
	resp, err := http.Get(is.URL() + "/.well-known/oauth-authorization-server")
	if err != nil {
		t.Fatal(err)
	}
	var md struct {
		Registration string `json:"registration_endpoint"`
	}
	err = json.NewDecoder(resp.Body).Decode(&md)
	resp.Body.Close()
	if err != nil || md.Registration != is.URL()+"/register" {
		t.Fatalf("metadata: registration_endpoint %q (%v), want %s/register", md.Registration, err, is.URL())
	}

	register := func(body string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Post(md.Registration, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var got map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
			t.Fatalf("%s: answer is not JSON: %v", body, err)
		}
		return resp.StatusCode, got
	}
	for body, wantErr := range map[string]string{
		`not json`:                          "invalid_client_metadata",
		`[]`:                                "invalid_client_metadata",
		`{"client_name":"x"}`:               "invalid_redirect_uri",
		`{"redirect_uris":[]}`:              "invalid_redirect_uri",
		`{"redirect_uris":["http://a", 1]}`: "invalid_redirect_uri",
	} {
		if code, got := register(body); code != http.StatusBadRequest || got["error"] != wantErr {
			t.Errorf("%s: %d %v, want 400 %s", body, code, got, wantErr)
		}
	}
	if n := is.Regs.Load(); n != 0 {
		t.Fatalf("%d clients registered from bad metadata", n)
	}

	code, public := register(`{"client_name":"Claude Code","redirect_uris":["http://localhost:1234/callback"],"token_endpoint_auth_method":"none"}`)
	if code != http.StatusCreated || public["client_id"] == "" || public["client_name"] != "Claude Code" ||
		public["token_endpoint_auth_method"] != "none" || public["client_secret"] != nil {
		t.Errorf("public client: %d %v", code, public)
	}
	code, confidential := register(`{"redirect_uris":["https://app.example/cb"]}`)
	if code != http.StatusCreated || confidential["client_secret"] == nil || confidential["client_id"] == public["client_id"] {
		t.Errorf("confidential client: %d %v (the public one was %v)", code, confidential, public["client_id"])
	}
	if n := is.Regs.Load(); n != 2 {
		t.Errorf("%d clients registered, want 2", n)
	}
}
