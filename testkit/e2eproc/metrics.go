package e2eproc

import (
	"context"
	"fmt"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics is one scrape of a /metrics endpoint, by family name.
type Metrics map[string]*dto.MetricFamily

// Scrape reads and parses http://addr/metrics.
func Scrape(addr string) (Metrics, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse /metrics: %w", err)
	}
	return fams, nil
}

// Get sums the counters, gauges or untyped values of family name whose
// labels include every pair of labels (given as "k", "v", ...). A family or
// a label set that was never touched counts as 0.
func (m Metrics) Get(name string, labels ...string) float64 {
	var sum float64
	for _, mt := range m[name].GetMetric() {
		if !hasLabels(mt, labels) {
			continue
		}
		switch {
		case mt.Counter != nil:
			sum += mt.GetCounter().GetValue()
		case mt.Gauge != nil:
			sum += mt.GetGauge().GetValue()
		case mt.Untyped != nil:
			sum += mt.GetUntyped().GetValue()
		}
	}
	return sum
}

// Histogram sums the observations (sum) and their number (count) of
// histogram family name, over its series whose labels include every pair of
// labels. A family never observed gives 0, 0.
func (m Metrics) Histogram(name string, labels ...string) (sum, count float64) {
	for _, mt := range m[name].GetMetric() {
		if h := mt.GetHistogram(); h != nil && hasLabels(mt, labels) {
			sum += h.GetSampleSum()
			count += float64(h.GetSampleCount())
		}
	}
	return sum, count
}

func hasLabels(mt *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		found := false
		for _, lp := range mt.GetLabel() {
			found = found || lp.GetName() == labels[i] && lp.GetValue() == labels[i+1]
		}
		if !found {
			return false
		}
	}
	return true
}
