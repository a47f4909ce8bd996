package harness_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/harness/player"
	"github.com/schedloop/schedloop/internal/trace"
)

// benchLines collects the BENCH figures; TestMain prints the last value of
// each once the benchmarks are done, so reruns with larger b.N do not repeat them.
var benchLines struct {
	sync.Mutex
	order []string
	value map[string]string
}

func recordBench(name, value, unit string) {
	benchLines.Lock()
	defer benchLines.Unlock()
	if benchLines.value == nil {
		benchLines.value = map[string]string{}
	}
	if _, ok := benchLines.value[name]; !ok {
		benchLines.order = append(benchLines.order, name)
	}
	benchLines.value[name] = value + " " + unit
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, name := range benchLines.order {
		fmt.Printf("BENCH %s %s\n", name, benchLines.value[name])
	}
	os.Exit(code)
}

// startupRuns is how many clusters one iteration starts, for a steadier mean.
const startupRuns = 3

// BenchmarkHarnessStartup times Start (etcd and kube-apiserver up, serving,
// PodGroup CRD established) and reports the mean in seconds.
func BenchmarkHarnessStartup(b *testing.B) {
	var total time.Duration
	runs := 0
	for range b.N {
		for range startupRuns {
			c, err := harness.Start(context.Background(), harness.Options{Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			total += c.StartupTime
			runs++
			c.Stop()
		}
	}
	mean := total.Seconds() / float64(runs)
	b.ReportMetric(mean, "startup_s")
	recordBench("harness_startup_s", strconv.FormatFloat(mean, 'f', 2, 64), "s")
}

// BenchmarkHarnessJobs replays 300 jobs, arriving faster than they can be
// handled, on 100 eight-GPU nodes through the stock kube-scheduler, and
// reports trace jobs submitted, run and finished per wall second.
func BenchmarkHarnessJobs(b *testing.B) {
	var jobsDone int
	var wall time.Duration
	for range b.N {
		b.StopTimer()
		c, err := harness.Start(context.Background(), harness.Options{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		clock, err := harness.NewClock(600)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.AddNodes(ctx, testInventory(b, 100).Nodes, harness.NodeOptions{Clock: clock, Workers: 8}); err != nil {
			b.Fatal(err)
		}
		if _, err := c.StartScheduler(ctx, harness.SchedulerOptions{}); err != nil {
			b.Fatal(err)
		}
		jobs := trace.Generate(trace.GenConfig{
			Seed: 11, Jobs: 300, MeanInterarrival: time.Second,
			MinDuration: time.Minute, MaxDuration: 3 * time.Minute,
			GangSizes: []int{1, 1, 2, 4}, GPUsPerMember: []int{1, 2, 4, 8}, IdleShare: 0.1,
		})
		p, err := player.New(c.Client, c.Dynamic, jobs, player.Options{Clock: clock})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		runCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		rep, err := p.Run(runCtx)
		cancel()
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range rep.Jobs {
			if r.Done() {
				jobsDone++
			}
		}
		wall += rep.Ended.Sub(rep.Began)
		c.Stop()
	}
	rate := float64(jobsDone) / wall.Seconds()
	b.ReportMetric(rate, "jobs/s")
	recordBench("harness_jobs_per_s", strconv.FormatFloat(rate, 'f', 1, 64), "jobs/s")
	if rss, ok := peakRSSMiB(); ok {
		recordBench("harness_peak_rss_mib", strconv.Itoa(rss), "MiB")
	}
}

// peakRSSMiB is this process's peak resident set (VmHWM), in MiB.
func peakRSSMiB() (int, bool) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			if err != nil {
				return 0, false
			}
			return kb / 1024, true
		}
	}
	return 0, false
}
