package github

// One call to the REST API, and the translation of its failure, GitHub's
// rate limits included.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/internal/rest"
)

func (t *Target) get(ctx context.Context, u string, out any) error {
	req, err := rest.NewJSONRequest(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	return t.call(req, out)
}

func (t *Target) call(req *http.Request, out any) error {
	_, err := t.callResp(req, out)
	return err
}

// callResp is call that also returns the answer (its Link header pages).
func (t *Target) callResp(req *http.Request, out any) (*rest.Response, error) {
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", APIVersion)
	req.Header.Set("Authorization", "Bearer "+t.cfg.Token.Reveal())
	resp, err := t.api.Do(req)
	if err != nil {
		return nil, err
	}
	if !resp.OK() {
		return nil, t.fail(resp)
	}
	return resp, resp.Result(out)
}

// fail translates an error answer. GitHub answers a rate limit with 403 or
// 429 ("Rate limits for the REST API"):
//   - primary: x-ratelimit-remaining is 0; wait until x-ratelimit-reset
//     (UTC epoch seconds);
//   - secondary: the message says so ("You have exceeded a secondary rate
//     limit", formerly "You have triggered an abuse detection mechanism");
//     wait retry-after seconds if given, else until x-ratelimit-reset if
//     x-ratelimit-remaining is 0, else at least a minute.
//
// Content created too quickly is also refused with 422 "was submitted too
// quickly", a secondary limit in all but status. None of these processed
// the request: transient, and not acted. A 403 that is none of them is a
// permission problem (Auth).
func (t *Target) fail(r *rest.Response) *downstream.Error {
	var ans struct {
		Message string `json:"message"`
		Errors  []struct {
			Resource, Field, Code, Message string
		} `json:"errors"`
	}
	msg := rest.Message(r)
	if json.Unmarshal(r.Body, &ans) == nil && ans.Message != "" {
		msg = ans.Message
		for _, e := range ans.Errors {
			switch {
			case e.Message != "":
				msg += "; " + e.Message
			case e.Field != "":
				msg += fmt.Sprintf("; %s.%s: %s", e.Resource, e.Field, e.Code)
			}
		}
	}
	e := t.api.Fail(r, msg)
	low := strings.ToLower(msg)
	limited := r.Status == http.StatusForbidden || r.Status == http.StatusTooManyRequests
	primary := limited && r.Header.Get("x-ratelimit-remaining") == "0"
	secondary := limited && (strings.Contains(low, "secondary rate limit") || strings.Contains(low, "abuse detection")) ||
		r.Status == http.StatusUnprocessableEntity && strings.Contains(low, "submitted too quickly")
	if !primary && !secondary && (!limited || r.Status == http.StatusForbidden && r.Header.Get("Retry-After") == "") {
		return e // 429 is already transient; a bare 403 is a real permission problem
	}
	e.Class, e.MayHaveActed, e.Throttled = downstream.Transient, false, true
	if e.RetryAfter == 0 && primary {
		if reset, err := strconv.ParseInt(r.Header.Get("x-ratelimit-reset"), 10, 64); err == nil {
			e.RetryAfter = max(time.Unix(reset, 0).Sub(t.api.Now()), 0)
		}
	}
	if e.RetryAfter == 0 && secondary {
		e.RetryAfter = SecondaryWait
	}
	return e
}
