package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"
)

// promTargets is what Prometheus's /api/v1/targets answers.
type promTargets struct {
	Data struct {
		ActiveTargets []struct {
			Labels    map[string]string `json:"labels"`
			Health    string            `json:"health"`
			LastError string            `json:"lastError"`
		} `json:"activeTargets"`
	} `json:"data"`
}

// promQuery is what Prometheus's /api/v1/query answers for a vector.
type promQuery struct {
	Status string `json:"status"`
	Data   struct {
		Result []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	} `json:"data"`
}

func getJSON(url string, v any) error {
	resp, err := http.Get(url) //nolint:gosec,noctx // the test's own Prometheus
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// query returns the value of a PromQL expression that yields one sample.
func query(c *composeFleet, expr string) (float64, error) {
	var q promQuery
	if err := getJSON(c.promURL+"/api/v1/query?query="+url.QueryEscape(expr), &q); err != nil {
		return 0, err
	}
	if len(q.Data.Result) != 1 {
		return 0, fmt.Errorf("%s: %d samples", expr, len(q.Data.Result))
	}
	s, _ := q.Data.Result[0].Value[1].(string)
	return strconv.ParseFloat(s, 64)
}

// Compose's Prometheus finds every replica through Docker's DNS and
// scrapes each one's /metrics: one coordinator, every worker and gate
// runner up, the leader's gauge and each runner's slots in its database.
func testComposeMetrics(t *testing.T, c *composeFleet, workers, gaters int) {
	want := map[string]int{"supervisor-coordinator": 1, "supervisor-worker": workers, "supervisor-gaterunner": gaters}
	var last promTargets
	waitFor(t, 2*time.Minute, "Prometheus to scrape every replica", func() bool {
		last = promTargets{}
		if err := getJSON(c.promURL+"/api/v1/targets", &last); err != nil {
			return false
		}
		up := map[string]int{}
		for _, tg := range last.Data.ActiveTargets {
			if tg.Health == "up" {
				up[tg.Labels["job"]]++
			}
		}
		for job, n := range want {
			if up[job] != n {
				return false
			}
		}
		return true
	})
	for _, q := range []struct {
		expr string
		want float64
	}{
		{`sum(supervisor_coordinator_leader)`, 1},
		{`count(supervisor_runner_slots{kind="agent",state="free"})`, float64(workers)},
		{`count(supervisor_runner_slots{kind="gate",state="free"})`, float64(gaters)},
		{`count(up{job=~"supervisor-.*"} == 1)`, float64(1 + workers + gaters)},
	} {
		waitFor(t, time.Minute, fmt.Sprintf("Prometheus: %s = %v", q.expr, q.want), func() bool {
			got, err := query(c, q.expr)
			return err == nil && got == q.want
		})
	}
}
