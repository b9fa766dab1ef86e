package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// samples are the series of one /metrics page: "name{labels}" → value.
type samples map[string]float64

// scrape reads the Prometheus text page at http://addr/metrics.
func scrape(ctx context.Context, addr string) (samples, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("bench: scrape %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("bench: scrape %s: %s", addr, resp.Status)
	}
	return parseSamples(bufio.NewScanner(resp.Body))
}

func parseSamples(sc *bufio.Scanner) (samples, error) {
	s := samples{}
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return nil, fmt.Errorf("bench: metrics line without a value: %q", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("bench: metrics line %q: %w", line, err)
		}
		s[strings.TrimSpace(line[:i])] = v
	}
	return s, sc.Err()
}

// sum adds up every series of the metric called name.
func (s samples) sum(name string) float64 {
	var t float64
	for k, v := range s {
		if k == name || (strings.HasPrefix(k, name) && k[len(name)] == '{') {
			t += v
		}
	}
	return t
}
