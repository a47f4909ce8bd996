package collector

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/eta"
	"github.com/schedloop/schedloop/internal/etaserve"
	"github.com/schedloop/schedloop/internal/podspec"
	"github.com/schedloop/schedloop/internal/store"
)

// Defaults of Annotator.
const (
	// DefaultETAAnnotateQPS bounds the pod patches a second: a cluster of
	// thousands of pending pods whose estimates all move at once (a large
	// job ends) is annotated over a few estimates rather than in one burst
	// at the apiserver.
	DefaultETAAnnotateQPS = 5
	// MaterialETAChange: an estimate moved by less than this share of the
	// wait it announced is not news worth a patch.
	MaterialETAChange = 0.2
	// MinETAChange: nor is one moved by less than a minute.
	MinETAChange = time.Minute
)

// Annotator writes each pending job's estimate onto its waiting pods
// (podspec.AnnotationETA), so `kubectl get pod -o yaml` shows it: only when
// the state changes or the p50 or p90 moves materially since the last
// patch (MaterialETAChange, MinETAChange), and at most Limiter allows; a
// pod left out by the limit is patched by a later estimate.
type Annotator struct {
	Client  kubernetes.Interface
	Store   *store.Store
	Limiter flowcontrol.RateLimiter

	mu      sync.Mutex
	written map[string]etaMark // by pod UID
}

// NewAnnotator patches at most qps pods a second (bursts of twice that).
func NewAnnotator(client kubernetes.Interface, st *store.Store, qps float64) *Annotator {
	return &Annotator{Client: client, Store: st, Limiter: flowcontrol.NewTokenBucketRateLimiter(float32(qps), max(int(2*qps), 1))}
}

// etaMark is what an annotation says.
type etaMark struct {
	State eta.State  `json:"state"`
	P10   *time.Time `json:"p10,omitempty"`
	P50   *time.Time `json:"p50,omitempty"`
	P90   *time.Time `json:"p90,omitempty"`
	Made  time.Time  `json:"made"`
}

// material reports whether next says something last did not.
func (m etaMark) material(next etaMark) bool {
	if m.State != next.State {
		return true
	}
	moved := func(a, b *time.Time) bool {
		if a == nil || b == nil {
			return (a == nil) != (b == nil)
		}
		wait := a.Sub(m.Made)
		return a.Sub(*b).Abs() > max(MinETAChange, time.Duration(MaterialETAChange*float64(wait)))
	}
	return moved(m.P50, next.P50) || moved(m.P90, next.P90)
}

// Annotate patches the waiting pods (created since since) of a's jobs
// whose estimates changed materially, and returns how many it patched. It
// forgets pods no longer waiting.
func (n *Annotator) Annotate(ctx context.Context, a etaserve.Answer, since time.Time) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.written == nil {
		n.written = map[string]etaMark{}
	}
	all, err := n.Store.WaitingPods(ctx, since)
	if err != nil {
		return 0, err
	}
	byJob := map[string][]schedloop.Pod{}
	for _, p := range all {
		byJob[p.JobUID] = append(byJob[p.JobUID], p)
	}
	waiting := map[string]bool{}
	patched := 0
	var firstErr error
	for _, j := range a.Jobs {
		next := etaMark{State: j.State, P10: j.P10, P50: j.P50, P90: j.P90, Made: a.At.UTC()}
		for _, p := range byJob[j.UID] {
			waiting[p.UID] = true
			if last, ok := n.written[p.UID]; ok && !last.material(next) {
				continue
			}
			if !n.Limiter.TryAccept() {
				continue
			}
			if err := n.patch(ctx, p, next); err != nil {
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			n.written[p.UID] = next
			patched++
		}
	}
	for uid := range n.written {
		if !waiting[uid] {
			delete(n.written, uid)
		}
	}
	return patched, firstErr
}

func (n *Annotator) patch(ctx context.Context, p schedloop.Pod, m etaMark) error {
	value, err := json.Marshal(m)
	if err != nil {
		return err
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         p.UID, // the pod estimated, not one recreated under its name
		"annotations": map[string]string{podspec.AnnotationETA: string(value)},
	}})
	if err != nil {
		return err
	}
	if _, err := n.Client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("annotate pod %s/%s with its estimate: %w", p.Namespace, p.Name, err)
	}
	return nil
}
