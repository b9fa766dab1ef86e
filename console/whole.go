package console

import (
	"context"
	"fmt"
	"slices"
	"time"

	"ticketrelay/front/advice"
	"ticketrelay/request"
	"ticketrelay/store/clusterrec"
	"ticketrelay/store/ledger"
	"ticketrelay/store/trail"
	"ticketrelay/ticket"
)

// Whole is the whole installation as a host of several sees it: the
// cluster record's copy this host keeps (clusterrec.Copy into its ledger)
// for the lists, and the record itself for one request. See decision
// 0152.
type Whole struct {
	// Host is this host's id: the holder whose requests the actions here
	// change.
	Host string
	Copy WholeCopy
	// Record reads a request's record from the bucket's leader: its
	// status, its ticket and the host that holds it (clusterrec.Store.Report).
	Record func(ctx context.Context, id string) (request.Report, ticket.Ticket, string, bool, error)
	// ConsoleOf is the console address a host published; "" if none.
	ConsoleOf func(ctx context.Context, host string) (string, error)
	// State is how current the copy is (clusterrec.Copy.State).
	State func() (records, trail clusterrec.CopyState)
}

// WholeCopy is the copy of the cluster record in this host's ledger.
type WholeCopy interface {
	ListCluster(ctx context.Context, f ledger.RequestFilter) (ledger.RequestPage, error)
	ClusterCounts(ctx context.Context) (ledger.Summary, error)
	ClusterLastErrors(ctx context.Context, targets []string) (map[string]ledger.LastError, error)
	ClusterRequest(ctx context.Context, id string) (request.CopiedRecord, bool, error)
	ClusterAttempts(ctx context.Context, id string) ([]request.Attempt, error)
	ClusterTrail(ctx context.Context, id string) ([]trail.Entry, error)
}

var _ WholeCopy = (*ledger.Ledger)(nil)

// freshness is what a page says of the copy it read: current, or as of
// when and why not.
type freshness struct {
	Current      bool
	Checked      time.Time // the copy's last answer from the stream; zero: none yet
	Behind       uint64
	Problem      string
	FailingSince time.Time
}

func (w *Whole) freshness(now time.Time, st clusterrec.CopyState) freshness {
	f := freshness{Current: st.Current(now), Checked: st.Checked, Behind: st.Behind, FailingSince: st.FailingSince}
	switch {
	case f.Current:
	case st.Err != nil:
		f.Problem = st.Err.Error()
	case st.Checked.IsZero():
		f.Problem = "the copy has not read the stream yet"
	case st.Behind > 0:
		f.Problem = fmt.Sprintf("the copy is catching up: %d changes behind", st.Behind)
	default:
		f.Problem = "the stream has not answered since " + st.Checked.UTC().Format(time.TimeOnly)
	}
	return f
}

// heldElsewhere says where to act on request id when another host's
// ledger holds it (only that ledger's holder can redrive or resolve it);
// "" when this host holds it, or no host does.
func (c *Console) heldElsewhere(ctx context.Context, id string) string {
	w := c.cfg.Whole
	if w == nil {
		return ""
	}
	_, _, holder, found, err := w.Record(ctx, id)
	if err != nil {
		row, ok, cerr := w.Copy.ClusterRequest(ctx, id)
		if cerr != nil || !ok {
			return ""
		}
		holder = row.Host
	} else if !found {
		return ""
	}
	if holder == "" || holder == w.Host {
		return ""
	}
	return c.actOn(ctx, holder)
}

// actOn is the sentence that sends an operator to host's console.
func (c *Console) actOn(ctx context.Context, host string) string {
	url, err := c.cfg.Whole.ConsoleOf(ctx, host)
	switch {
	case err != nil:
		return fmt.Sprintf("held by host %s: act on its console (its address could not be read: %v), or run the command on that host", host, err)
	case url == "":
		return fmt.Sprintf("held by host %s, which serves no console: run the command on that host", host)
	}
	return fmt.Sprintf("held by host %s: act on its console, %s", host, url)
}

// wholeRequest fills data, a request's page, from the cluster record and
// the copy: the record's status is current where this host's ledger may
// not be (another host's forwarder delivered it), the attempts and audit
// entries are every host's.
func (c *Console) wholeRequest(ctx context.Context, id string, data map[string]any) error {
	w := c.cfg.Whole
	local := data["Status"].(request.Report)
	rep, tk, holder, found, err := w.Record(ctx, id)
	now := c.cfg.Now()
	records, trailState := w.State()
	switch {
	case err != nil:
		row, ok, cerr := w.Copy.ClusterRequest(ctx, id)
		if cerr != nil {
			return cerr
		}
		f := w.freshness(now, records)
		data["Stale"] = fmt.Sprintf("The cluster record did not answer (%v): this page is this host's ledger and the copy as of %s, and may be out of date.",
			err, whenOrNever(f.Checked))
		if ok {
			holder = row.Host
			if local.Status == request.StatusUnknown {
				t := ticket.Ticket{ID: row.TicketID}
				t.Target, t.Title, t.Kind = row.Target, row.Title, ticket.KindCreate
				rep = request.StatusOf(t, row.AcceptedAt, nil, row.Delivery)
				rep.RequestID, rep.Scoped = id, id
				data["Status"], data["Detail"] = rep, ""
			}
		}
	case found:
		if local.Status != request.StatusUnknown {
			// What only the holder's ledger knows.
			rep.PublishedAt, rep.Comments, rep.Updates = local.PublishedAt, local.Comments, local.Updates
		}
		rep.RequestID = id
		data["Status"] = rep
		data["Detail"] = advice.Advise(rep)
		if _, ok := data["Ticket"]; !ok || local.Status == request.StatusUnknown {
			tk.Subject = ""
			data["Ticket"] = tk
		}
	}
	data["Holder"] = holder
	if holder != "" && holder != w.Host {
		data["Elsewhere"] = c.actOn(ctx, holder)
	}

	mine, _ := data["Attempts"].([]request.Attempt)
	copied, err := w.Copy.ClusterAttempts(ctx, id)
	if err != nil {
		return err
	}
	attempts := mine
	for _, a := range copied {
		// This host's calls are in its ledger with their HTTP status and
		// latency, when it holds the request.
		if len(mine) == 0 || a.Host != w.Host {
			attempts = append(attempts, a)
		}
	}
	slices.SortStableFunc(attempts, func(a, b request.Attempt) int { return a.At.Compare(b.At) })
	data["Attempts"] = attempts

	if _, shown := data["TrailShown"]; shown {
		others, err := w.Copy.ClusterTrail(ctx, id)
		if err != nil {
			return err
		}
		entries := append(data["Trail"].([]trail.Entry), others...)
		slices.SortStableFunc(entries, func(a, b trail.Entry) int { return a.Time.Compare(b.Time) })
		data["Trail"] = entries
		if f := w.freshness(now, trailState); !f.Current {
			data["TrailStale"] = "Other hosts' entries as of " + whenOrNever(f.Checked) + ": " + f.Problem + "."
		}
	}
	return nil
}

func whenOrNever(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}
