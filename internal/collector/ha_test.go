package collector_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/schedloop/schedloop/internal/collector"
	"github.com/schedloop/schedloop/internal/dcgm"
	"github.com/schedloop/schedloop/internal/election"
	"github.com/schedloop/schedloop/internal/events"
	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/harness/exporter"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

// TestStandbyTakesOverWhenTheActiveCollectorDies runs two collector
// replicas against one cluster and one database, one active through the
// Lease. The active one dies mid-run without releasing the Lease, as a
// crashed pod does; pods created while the standby takes over must be
// stored, no exporter may go unscraped for more than two intervals, and no
// sample may be stored twice.
func TestStandbyTakesOverWhenTheActiveCollectorDies(t *testing.T) {
	const every = 3 * time.Second
	c := harness.NewForTest(t, harness.Options{})
	s := storetest.New(t)
	urls, stop, err := exporter.Farm{Nodes: 3}.Serve()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)

	type replica struct {
		pipe *collector.Pipeline
		kill context.CancelFunc
	}
	start := func(name string) replica {
		ctx, kill := context.WithCancel(context.Background())
		lease := election.Config{Namespace: "kube-system", Lease: "schedloop-collector", Identity: name,
			LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 250 * time.Millisecond, KeepOnCancel: true}
		pipe, err := collector.StartPipeline(ctx, collector.PipelineConfig{Store: s,
			Scraper: &dcgm.ExporterScraper{Targets: dcgm.StaticTargets(urls)}, ScrapeEvery: every,
			Ingest: collector.IngestOptions{FlushInterval: 50 * time.Millisecond},
			Watch:  &events.WatchOptions{Client: c.Client, Dynamic: c.Dynamic, FlushInterval: 100 * time.Millisecond},
			Elect: func(ctx context.Context, lead func(context.Context)) error {
				return election.Run(ctx, c.Client, lease, lead)
			}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { kill(); _ = pipe.Wait() })
		return replica{pipe, kill}
	}
	replicas := []replica{start("collector-a"), start("collector-b")}
	leading := func() []int {
		var out []int
		for i, r := range replicas {
			if testutil.ToFloat64(r.pipe.Metrics.Leader) == 1 {
				out = append(out, i)
			}
		}
		return out
	}
	waitUntil(t, "one replica to lead", func(context.Context) (bool, error) { return len(leading()) == 1, nil })
	waitUntil(t, "both replicas' informers to list", func(context.Context) (bool, error) {
		return replicas[0].pipe.Ready() == nil && replicas[1].pipe.Ready() == nil, nil
	})
	active := leading()[0]
	standby := 1 - active
	if testutil.ToFloat64(replicas[standby].pipe.Metrics.Received) != 0 {
		t.Fatal("the standby scraped while the other replica led")
	}
	time.Sleep(3 * every)

	// The active replica dies; pods come and go while the standby takes over.
	ctx := t.Context()
	replicas[active].kill()
	var created []string
	for i := range 3 {
		name := fmt.Sprintf("during-takeover-%d", i)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}
		if _, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		created = append(created, name)
		time.Sleep(300 * time.Millisecond)
	}
	waitUntil(t, "the standby to lead", func(context.Context) (bool, error) {
		return slices.Equal(leading(), []int{standby}), nil
	})
	time.Sleep(3 * every)
	replicas[standby].pipe.StopTelemetry()
	waitUntil(t, "every sample to be stored", func(context.Context) (bool, error) { return replicas[standby].pipe.Stored(), nil })

	var dups int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM (SELECT gpu_uuid, ts FROM gpu_samples GROUP BY 1, 2 HAVING count(*) > 1) d`).Scan(&dups); err != nil {
		t.Fatal(err)
	}
	if dups > 0 {
		t.Errorf("%d samples stored twice", dups)
	}
	// Each exporter's scrapes, in time order: no gap over two intervals
	// (plus a scrape's own latency).
	rows, err := s.Pool().Query(ctx, `SELECT node, max(gap), count(*) FROM (
		SELECT node, ts - lag(ts) OVER (PARTITION BY node ORDER BY ts) AS gap FROM (SELECT DISTINCT node, ts FROM gpu_samples) x) y
		GROUP BY node ORDER BY node`)
	if err != nil {
		t.Fatal(err)
	}
	nodes := 0
	for rows.Next() {
		var node string
		var gap time.Duration
		var n int
		if err := rows.Scan(&node, &gap, &n); err != nil {
			t.Fatal(err)
		}
		nodes++
		t.Logf("%s: %d scrapes, longest gap %v", node, n, gap)
		if gap > 2*every+every/2 {
			t.Errorf("%s went unscraped for %v, over two intervals of %v", node, gap, every)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if nodes != 3 {
		t.Errorf("samples of %d exporters stored, want 3", nodes)
	}
	waitUntil(t, "the pods created during the takeover to be stored", func(ctx context.Context) (bool, error) {
		var n int
		err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM pods WHERE name = ANY($1)`, created).Scan(&n)
		return n == len(created), err
	})
}
