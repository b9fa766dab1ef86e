package console

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"ticketrelay/delivery/forwarder"
	"ticketrelay/front/advice"
	"ticketrelay/request"
	"ticketrelay/store/ledger"
)

// targetRow is one target on the overview.
type targetRow struct {
	ledger.TargetCounts
	Live      *forwarder.TargetLive
	Paused    time.Duration // left of a 429's pause; 0: not paused
	Rate      float64       // deliveries a second over the last minute; -1: not known yet
	LastError ledger.LastError
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	// The counts are kept on write (ledger request_counts, and
	// cluster_counts for the copy of the cluster record): read for every
	// page, exact. With several hosts the targets' counts, the uncertain
	// requests and the last errors are every host's, from the copy.
	counts, list, lastErrors := c.cfg.Store.Counts, c.cfg.Store.ListRequests, c.cfg.Store.LastErrors
	data := map[string]any{"LiveShown": c.cfg.Live != nil}
	if w := c.cfg.Whole; w != nil {
		records, _ := w.State()
		data["Whole"] = w.freshness(c.cfg.Now(), records)
		counts, list, lastErrors = w.Copy.ClusterCounts, w.Copy.ListCluster, w.Copy.ClusterLastErrors
	}
	s, err := counts(ctx)
	if err != nil {
		c.fail(w, err)
		return
	}
	uncertain, err := list(ctx, ledger.RequestFilter{Status: string(request.StatusUncertain), Limit: 20})
	if err != nil {
		c.fail(w, err)
		return
	}
	names := make([]string, len(s.Targets))
	for i, t := range s.Targets {
		names[i] = t.Target
	}
	lastErrs, err := lastErrors(ctx, names)
	if err != nil {
		c.fail(w, err)
		return
	}
	live := map[string]forwarder.TargetLive{}
	if c.cfg.Live != nil {
		for _, l := range c.cfg.Live() {
			live[l.Target] = l
		}
	}
	now := c.cfg.Now()
	rows := make([]targetRow, len(s.Targets))
	for i, t := range s.Targets {
		rows[i] = targetRow{TargetCounts: t, Rate: c.rates.rate(t.Target), LastError: lastErrs[t.Target]}
		if l, ok := live[t.Target]; ok {
			rows[i].Live = &l
			if l.PausedUntil.After(now) {
				rows[i].Paused = l.PausedUntil.Sub(now).Round(time.Second)
			}
		}
	}
	data["Summary"], data["Targets"], data["Uncertain"] = s, rows, uncertain
	if c.cfg.Cluster != nil {
		data["Cluster"] = c.cfg.Cluster(ctx)
	}
	c.render(w, r, "overview", data)
}

// listStatuses are the statuses the list offers, in its order.
var listStatuses = []string{ledger.ListAll, ledger.ListWaiting, ledger.ListInFlight, string(request.StatusRetrying),
	string(request.StatusFailed), string(request.StatusUncertain), string(request.StatusDelivered)}

// pageSize is the rows of a list page.
const pageSize = 50

// timeForm is the layout of the list's time fields (an HTML
// datetime-local input, read as UTC).
const timeForm = "2006-01-02T15:04"

func (c *Console) requests(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := ledger.RequestFilter{Status: q.Get("status"), Target: strings.TrimSpace(q.Get("target")), Subject: strings.TrimSpace(q.Get("subject")),
		Text: strings.TrimSpace(q.Get("q")), Fingerprint: strings.TrimSpace(q.Get("fingerprint")), Limit: pageSize}
	var problems []string
	for _, tf := range []struct {
		name string
		into *time.Time
	}{{"from", &f.From}, {"to", &f.To}} {
		if v := q.Get(tf.name); v != "" {
			t, err := time.Parse(timeForm, v)
			if err != nil {
				problems = append(problems, tf.name+": want a date and time as 2006-01-02T15:04 (UTC)")
				continue
			}
			*tf.into = t
		}
	}
	if v := q.Get("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			problems = append(problems, "before: not a position in the list")
		}
		f.Before = n
	}
	data := map[string]any{"Filter": f, "Statuses": listStatuses, "Query": q, "Host": ""}
	if len(problems) > 0 {
		w.WriteHeader(http.StatusBadRequest)
		data["Problems"] = problems
		c.render(w, r, "requests", data)
		return
	}
	start := time.Now()
	list := c.cfg.Store.ListRequests
	if w := c.cfg.Whole; w != nil {
		// Every host's requests, from the copy: say how current it is
		// before reading it, so that a page is never fresher than said.
		records, _ := w.State()
		data["Whole"], data["Host"] = w.freshness(c.cfg.Now(), records), w.Host
		list = w.Copy.ListCluster
	}
	page, err := list(r.Context(), f)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		data["Problems"] = []string{err.Error()}
		c.render(w, r, "requests", data)
		return
	}
	data["Page"] = page
	data["Took"] = time.Since(start).Round(time.Millisecond)
	if page.Next != 0 {
		next := url.Values{}
		for k, v := range q {
			next[k] = v
		}
		next.Set("before", strconv.FormatInt(page.Next, 10))
		data["NextQuery"] = next.Encode()
	}
	c.render(w, r, "requests", data)
}

func (c *Console) request(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	data, err := c.requestData(r.Context(), id)
	if err != nil {
		c.fail(w, err)
		return
	}
	if data["Status"].(request.Report).Status == request.StatusUnknown {
		w.WriteHeader(http.StatusNotFound)
	}
	c.render(w, r, "request", data)
}

// requestData is what a request's page shows. With several hosts the
// request may be another host's: its record and the copy say (Whole).
func (c *Console) requestData(ctx context.Context, id string) (map[string]any, error) {
	st, err := c.cfg.Store.FindScoped(ctx, id)
	if err != nil {
		return nil, err
	}
	data := map[string]any{"ID": id, "Status": st, "Detail": advice.Advise(st)}
	if st.Status == request.StatusUnknown && c.cfg.Whole == nil {
		return data, nil
	}
	if st.Status != request.StatusUnknown {
		p, err := c.cfg.Store.PriorDelivery(ctx, id)
		if err != nil {
			return nil, err
		}
		data["Ticket"] = p.Ticket
		if data["Attempts"], err = c.cfg.Store.Attempts(ctx, id); err != nil {
			return nil, err
		}
	}
	if c.cfg.Trail != nil {
		entries, err := c.cfg.Trail.ForRequest(ctx, id)
		if err != nil {
			return nil, errors.Join(errors.New("audit trail"), err)
		}
		data["Trail"], data["TrailShown"] = entries, true
	}
	if c.cfg.Whole != nil {
		if err := c.wholeRequest(ctx, id, data); err != nil {
			return nil, err
		}
	}
	if c.cfg.Trace != nil {
		data["Trace"] = c.cfg.Trace(id)
	}
	return data, nil
}

// rates keeps a minute of each target's delivery counter to say its rate.
type rates struct {
	mu      sync.Mutex
	samples map[string][]sample
}

type sample struct {
	at time.Time
	n  float64
}

// rateWindow is the span the rate is measured over; rateEvery how often
// the counters are read.
const (
	rateWindow = time.Minute
	rateEvery  = 5 * time.Second
)

func (r *rates) add(now time.Time, live []forwarder.TargetLive) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.samples == nil {
		r.samples = map[string][]sample{}
	}
	for _, l := range live {
		s := append(r.samples[l.Target], sample{now, l.Delivered})
		for len(s) > 2 && now.Sub(s[1].at) >= rateWindow {
			s = s[1:]
		}
		r.samples[l.Target] = s
	}
}

// rate is deliveries a second over the samples kept; -1 before two.
func (r *rates) rate(target string) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.samples[target]
	if len(s) < 2 {
		return -1
	}
	first, last := s[0], s[len(s)-1]
	return (last.n - first.n) / last.at.Sub(first.at).Seconds()
}

// Run reads the forwarders' counters every few seconds until ctx ends,
// for the overview's delivery rates.
func (c *Console) Run(ctx context.Context) error {
	if c.cfg.Live == nil {
		return nil
	}
	t := time.NewTicker(rateEvery)
	defer t.Stop()
	for {
		c.rates.add(c.cfg.Now(), c.cfg.Live())
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
