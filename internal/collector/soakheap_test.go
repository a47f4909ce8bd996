package collector_test

import (
	"fmt"
	"math"
	"regexp"
	"runtime"
	"slices"
	"strings"
)

// heapOwners names the parts of the soak's one process, each by the code on
// an allocation's stack; the first that matches owns it. The collector
// owns what its packages (and pgx under them) allocated; client-go
// informers are shared by the collector's watcher, the scheduler and the
// player, so they stand apart.
var heapOwners = []struct {
	name string
	re   *regexp.Regexp
}{
	{"soak fixtures (hostile pages, proxies)", regexp.MustCompile(`collector_test\.`)},
	{"collector (scrape, ingest, store, watcher, API)", regexp.MustCompile(`schedloop/internal/(collector|dcgm|store|events|api|why)\.|jackc/pg`)},
	{"etcd", regexp.MustCompile(`go\.etcd\.io/`)},
	{"scheduler", regexp.MustCompile(`k8s\.io/kubernetes/pkg/scheduler|schedloop/internal/(schedplugins|scoring)`)},
	{"apiserver", regexp.MustCompile(`k8s\.io/apiserver|k8s\.io/kubernetes/pkg/|kube-openapi|go-restful|k8s\.io/apiextensions`)},
	{"harness (simulated nodes, exporters, player)", regexp.MustCompile(`schedloop/internal/harness`)},
	{"client-go informers and clients", regexp.MustCompile(`k8s\.io/client-go`)},
}

const heapOther = "other (runtime, libraries)"

// heapByOwner is the live heap by owner, as of a collection it runs first,
// estimated from the runtime's sampled heap profile the way pprof scales it.
func heapByOwner() map[string]int64 {
	runtime.GC()
	var recs []runtime.MemProfileRecord
	for n, ok := runtime.MemProfile(nil, false); ; n, ok = runtime.MemProfile(recs, false) {
		if ok && recs != nil {
			recs = recs[:n]
			break
		}
		recs = make([]runtime.MemProfileRecord, n+50)
	}
	rate := float64(runtime.MemProfileRate)
	out := map[string]int64{}
	for _, r := range recs {
		objs, bytes := r.InUseObjects(), r.InUseBytes()
		if objs == 0 {
			continue
		}
		// Each sampled object stands for 1/(1-e^(-size/rate)) of its size.
		scale := 1 / (1 - math.Exp(-float64(bytes)/float64(objs)/rate))
		owner := heapOther
		frames := runtime.CallersFrames(r.Stack())
		var names []string
		for {
			f, more := frames.Next()
			names = append(names, f.Function)
			if !more {
				break
			}
		}
		stack := strings.Join(names, "\n")
		for _, o := range heapOwners {
			if o.re.MatchString(stack) {
				owner = o.name
				break
			}
		}
		out[owner] += int64(float64(bytes) * scale)
	}
	return out
}

// heapTable prints the owners' live heap at the start and the end, the
// largest at the end first.
func heapTable(start, end map[string]int64) []string {
	var owners []string
	for _, o := range heapOwners {
		owners = append(owners, o.name)
	}
	owners = append(owners, heapOther)
	slices.SortStableFunc(owners, func(a, b string) int { return int(end[b]>>20 - end[a]>>20) })
	var ts, te int64
	lines := []string{fmt.Sprintf("%-48s %9s %9s", "live heap by owner (MiB)", "start", "end")}
	for _, o := range owners {
		lines = append(lines, fmt.Sprintf("%-48s %9.1f %9.1f", o, float64(start[o])/(1<<20), float64(end[o])/(1<<20)))
		ts, te = ts+start[o], te+end[o]
	}
	return append(lines, fmt.Sprintf("%-48s %9.1f %9.1f", "total", float64(ts)/(1<<20), float64(te)/(1<<20)))
}
