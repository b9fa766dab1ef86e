package console

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"ticketrelay/internal/operate"
	"ticketrelay/request"
)

// maxSelection bounds the requests one redrive names.
const maxSelection = 500

// confirmed: the form is the confirmation page's; before it, the same
// POST shows that page.
func confirmed(r *http.Request) bool { return r.PostForm.Get("confirm") == "yes" }

func (c *Console) actor(r *http.Request) operate.Actor {
	var trail operate.Recorder
	if c.cfg.Trail != nil {
		trail = c.cfg.Trail
	}
	return operate.Actor{Subject: operator(r).subject, Trail: trail}
}

// selected is one request of a redrive's selection, as it stands now.
type selected struct {
	ID, Target string
	Status     request.Status
	Elsewhere  string // another host holds it: where to act on it
}

// redrive redrives the requests named (id) or every failed one (all, of
// target if given): first the confirmation, with the selection's count and
// targets, then the redrive.
func (c *Console) redrive(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	f := r.PostForm
	ids, all, target := f["id"], f.Get("all") == "yes", f.Get("target")
	switch {
	case all && len(ids) > 0, !all && len(ids) == 0:
		c.refuse(w, r, "Choose requests to redrive, or every failed request.")
		return
	case len(ids) > maxSelection:
		c.refuse(w, r, fmt.Sprintf("At most %d requests at once; redrive every failed request of a target instead.", maxSelection))
		return
	}
	if !confirmed(r) {
		data := map[string]any{"Action": "redrive", "All": all, "Target": target}
		byTarget := map[string]int{}
		if all {
			s, err := c.cfg.Store.Summarize(ctx)
			if err != nil {
				c.fail(w, err)
				return
			}
			for _, t := range s.Targets {
				if t.Failed > 0 && (target == "" || t.Target == target) {
					byTarget[t.Target] = t.Failed
				}
			}
		} else {
			var sel, refused []selected
			for _, id := range ids {
				st, err := c.cfg.Store.FindScoped(ctx, id)
				if err != nil {
					c.fail(w, err)
					return
				}
				s := selected{ID: id, Target: st.Target, Status: st.Status}
				if st.Status == request.StatusUnknown {
					s.Elsewhere = c.heldElsewhere(ctx, id)
				}
				if st.Status != request.StatusFailed {
					refused = append(refused, s)
					continue
				}
				sel = append(sel, s)
				byTarget[st.Target]++
			}
			data["Selected"], data["Refused"] = sel, refused
		}
		count := 0
		for _, n := range byTarget {
			count += n
		}
		data["Count"], data["ByTarget"] = count, sortedCounts(byTarget)
		c.render(w, r, "confirm", data)
		return
	}
	var done []string
	var err error
	if all {
		done, err = operate.RedriveFailed(ctx, c.cfg.Store, c.actor(r), target)
	} else {
		done, err = operate.Redrive(ctx, c.cfg.Store, c.actor(r), ids)
	}
	c.cfg.Log.Info("console: redrive", "operator", operator(r).subject, "redriven", len(done), "err", err)
	c.done(w, r, map[string]any{"Action": "redrive", "Done": done, "Errors": errorLines(err), "Confirmed": f.Get("count")})
}

// resolve settles an uncertain request: delivered with the external id
// the operator found, or not delivered (and then, if asked, redriven).
func (c *Console) resolve(w http.ResponseWriter, r *http.Request) {
	f := r.PostForm
	id, outcome, ext := f.Get("id"), f.Get("outcome"), strings.TrimSpace(f.Get("external_id"))
	var res operate.Resolution
	switch outcome {
	case "delivered":
		if ext == "" {
			c.refuse(w, r, "To settle it as delivered, give the id the target gave the ticket.")
			return
		}
		res.ExternalID = ext
	case "failed":
	case "redrive":
		res.Redrive = true
	default:
		c.refuse(w, r, "Choose how to settle the request.")
		return
	}
	if !confirmed(r) {
		st, err := c.cfg.Store.FindScoped(r.Context(), id)
		if err != nil {
			c.fail(w, err)
			return
		}
		if st.Status == request.StatusUnknown {
			if where := c.heldElsewhere(r.Context(), id); where != "" {
				w.WriteHeader(http.StatusConflict)
				c.render(w, r, "done", map[string]any{"Action": "nothing", "Errors": []string{id + " is " + where + "."}})
				return
			}
		}
		c.render(w, r, "confirm", map[string]any{"Action": "resolve", "ID": id, "Outcome": outcome, "ExternalID": ext, "Status": st})
		return
	}
	err := operate.Resolve(r.Context(), c.cfg.Store, c.actor(r), id, res)
	c.cfg.Log.Info("console: resolve", "operator", operator(r).subject, "request_id", id, "outcome", outcome, "err", err)
	var done []string
	if err == nil {
		done = []string{id}
	}
	c.done(w, r, map[string]any{"Action": "resolve", "Outcome": outcome, "ID": id, "Done": done, "Errors": errorLines(err)})
}

// forgetHost drops a finished host of a multi-host installation.
func (c *Console) forgetHost(w http.ResponseWriter, r *http.Request) {
	host := r.PostForm.Get("host")
	if c.cfg.Hosts == nil {
		c.refuse(w, r, "This dispatcher is not one of several hosts.")
		return
	}
	if !confirmed(r) {
		c.render(w, r, "confirm", map[string]any{"Action": "forget-host", "Host": host})
		return
	}
	err := operate.ForgetHost(r.Context(), c.cfg.Hosts, c.actor(r), host)
	c.cfg.Log.Info("console: forget-host", "operator", operator(r).subject, "host", host, "err", err)
	var done []string
	if err == nil {
		done = []string{host}
	}
	c.done(w, r, map[string]any{"Action": "forget-host", "Done": done, "Errors": errorLines(err)})
}

// done shows an action's outcome; 409 if any of it was refused.
func (c *Console) done(w http.ResponseWriter, r *http.Request, data map[string]any) {
	if len(data["Errors"].([]string)) > 0 {
		w.WriteHeader(http.StatusConflict)
	}
	c.render(w, r, "done", data)
}

// refuse answers a form that does not say what to do: nothing is done.
func (c *Console) refuse(w http.ResponseWriter, r *http.Request, why string) {
	w.WriteHeader(http.StatusBadRequest)
	c.render(w, r, "done", map[string]any{"Action": "nothing", "Errors": []string{why}})
}

func errorLines(err error) []string {
	if err == nil {
		return []string{}
	}
	var j interface{ Unwrap() []error }
	if errors.As(err, &j) {
		var out []string
		for _, e := range j.Unwrap() {
			out = append(out, e.Error())
		}
		return out
	}
	return []string{err.Error()}
}

type targetCount struct {
	Target string
	N      int
}

func sortedCounts(m map[string]int) []targetCount {
	out := make([]targetCount, 0, len(m))
	for t, n := range m {
		out = append(out, targetCount{t, n})
	}
	slices.SortFunc(out, func(a, b targetCount) int { return strings.Compare(a.Target, b.Target) })
	return out
}
