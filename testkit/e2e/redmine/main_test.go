package redmine_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"ticketrelay/testkit/e2eproc"
)

// enableEnv runs the tests: TICKETRELAY_REDMINE=1 (make test-redmine).
const enableEnv = "TICKETRELAY_REDMINE"

// server is the one Redmine of the package, started by TestMain.
var server struct {
	url     string // REDMINE_URL
	key     string // the admin's API key
	fieldID int    // the "ticketrelay request" custom field
	skip    string // why the tests skip, if they do
}

// Paths of the binaries built by TestMain.
var frontBin, dispatcherBin string

func TestMain(m *testing.M) {
	if os.Getenv(enableEnv) != "1" {
		server.skip = enableEnv + " is not 1: these tests need a real Redmine (make test-redmine installs and starts one)"
		os.Exit(m.Run())
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	root, err := e2eproc.ModuleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testkit/e2e/redmine:", err)
		return 1
	}
	tmp, err := os.MkdirTemp("", "ticketrelay-redmine-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "testkit/e2e/redmine:", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	if frontBin, dispatcherBin, err = e2eproc.Build(root, filepath.Join(tmp, "bin")); err != nil {
		fmt.Fprintln(os.Stderr, "testkit/e2e/redmine:", err)
		return 1
	}

	stop, err := startRedmine(filepath.Join(root, "testkit", "scripts", "redmine-up.sh"), filepath.Join(tmp, "redmine"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "testkit/e2e/redmine:", err)
		return 1
	}
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, "testkit/e2e/redmine:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// startRedmine runs testkit/scripts/redmine-up.sh serve dir in a process group of
// its own and reads its KEY=value lines; stop ends the group.
func startRedmine(script, dir string) (stop func() error, err error) {
	began := time.Now()
	cmd := exec.Command(script, "serve", dir)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", script, err)
	}
	done := make(chan error, 1)
	lines := make(chan map[string]string, 1)
	go func() {
		vals := map[string]string{}
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			k, v, _ := strings.Cut(sc.Text(), "=")
			vals[k] = v
			if k == "REDMINE_READY" {
				lines <- vals
				break
			}
		}
		io.Copy(io.Discard, out)
		done <- cmd.Wait()
	}()
	stop = func() error {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case err := <-done:
			var ee *exec.ExitError
			if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 0) {
				return fmt.Errorf("redmine-up.sh ended with %w", err)
			}
			return nil
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
			return errors.New("redmine did not stop within 30s of SIGTERM; killed")
		}
	}
	// Installing the packages on a fresh machine takes about a minute.
	select {
	case vals := <-lines:
		server.url, server.key = vals["REDMINE_URL"], vals["REDMINE_API_KEY"]
		server.fieldID, err = strconv.Atoi(vals["REDMINE_CUSTOM_FIELD_ID"])
		if server.url == "" || server.key == "" || err != nil {
			stop()
			return nil, fmt.Errorf("redmine-up.sh printed %v", vals)
		}
		fmt.Fprintf(os.Stderr, "testkit/e2e/redmine: Redmine at %s (custom field %d), up after %s\n", server.url, server.fieldID, time.Since(began).Round(time.Second))
		return stop, nil
	case err := <-done:
		return nil, fmt.Errorf("redmine-up.sh exited before Redmine was ready: %v", err)
	case <-time.After(4 * time.Minute):
		stop()
		return nil, errors.New("redmine was not ready within 4 minutes")
	}
}

// needRedmine skips t unless TestMain started a Redmine.
func needRedmine(t *testing.T) {
	t.Helper()
	if server.skip != "" {
		t.Skip(server.skip)
	}
}

// ---- Redmine's own API: what the tests count and create with ----

// api calls Redmine's REST API with the admin's key and decodes the answer
// into out (nil: none); it returns the status.
func api(t *testing.T, method, path string, body, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = strings.NewReader(string(b))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, server.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Redmine-API-Key", server.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return resp.StatusCode
}

// project creates a fresh project named after the test, with the given
// trackers (nil: all of them) and the key's custom field, and returns its
// identifier.
func project(t *testing.T, trackerIDs []int) string {
	t.Helper()
	if trackerIDs == nil {
		var ts struct {
			Trackers []struct{ ID int } `json:"trackers"`
		}
		if st := api(t, http.MethodGet, "/trackers.json", nil, &ts); st != http.StatusOK || len(ts.Trackers) == 0 {
			t.Fatalf("GET /trackers.json: HTTP %d, %+v", st, ts)
		}
		trackerIDs = []int{}
		for _, tr := range ts.Trackers {
			trackerIDs = append(trackerIDs, tr.ID)
		}
	}
	id := fmt.Sprintf("t%d-%s", time.Now().UnixNano()%1e9, strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())))
	id = id[:min(len(id), 100)]
	var ans struct {
		Project struct{ Identifier string } `json:"project"`
	}
	st := api(t, http.MethodPost, "/projects.json", map[string]any{"project": map[string]any{
		"name": id, "identifier": id, "is_public": false, "tracker_ids": trackerIDs,
		"issue_custom_field_ids": []int{server.fieldID}, "enabled_module_names": []string{"issue_tracking"},
	}}, &ans)
	if st != http.StatusCreated || ans.Project.Identifier != id {
		t.Fatalf("POST /projects.json %s: HTTP %d", id, st)
	}
	return id
}

// issue is Redmine's rendering of one issue.
type issue struct {
	ID           int64  `json:"id"`
	Subject      string `json:"subject"`
	Description  string `json:"description"`
	Tracker      struct{ ID int }
	Priority     struct{ ID int }
	CustomFields []struct {
		ID    int    `json:"id"`
		Value string `json:"value"`
	} `json:"custom_fields"`
}

func (is issue) field(id int) string {
	for _, cf := range is.CustomFields {
		if cf.ID == id {
			return cf.Value
		}
	}
	return ""
}

// issues lists every issue of project, open or closed, through Redmine's
// own API (never through our records), and checks total_count agrees.
func issues(t *testing.T, project string) []issue {
	t.Helper()
	var ans struct {
		Issues     []issue `json:"issues"`
		TotalCount int     `json:"total_count"`
	}
	q := url.Values{"project_id": {project}, "status_id": {"*"}, "sort": {"id"}, "limit": {"100"}}
	if st := api(t, http.MethodGet, "/issues.json?"+q.Encode(), nil, &ans); st != http.StatusOK {
		t.Fatalf("GET /issues.json of %s: HTTP %d", project, st)
	}
	if ans.TotalCount != len(ans.Issues) {
		t.Fatalf("project %s: total_count %d, %d issues listed", project, ans.TotalCount, len(ans.Issues))
	}
	return ans.Issues
}
