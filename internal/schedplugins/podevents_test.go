package schedplugins

import (
	"strconv"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// capturingInformer keeps the handler added to it, so a benchmark can
// deliver events to it as the informer's processor would.
type capturingInformer struct {
	cache.SharedIndexInformer
	handler cache.ResourceEventHandler
}

func (c *capturingInformer) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	c.handler = h
	return nil, nil
}

// eventPods are pods at successive resourceVersions, as a watch delivers
// changes.
func eventPods(n int) []*v1.Pod {
	pods := make([]*v1.Pod, n)
	for i := range pods {
		pods[i] = &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", ResourceVersion: strconv.Itoa(1_000_000 + i)}}
	}
	return pods
}

// handlers adds n no-op handlers through inf and returns what the informer
// would call for each.
func handlers(inf cache.SharedIndexInformer, under *capturingInformer, n int) []cache.ResourceEventHandler {
	out := make([]cache.ResourceEventHandler, n)
	for i := range out {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, _ any) {}}); err != nil {
			panic(err)
		}
		out[i] = under.handler
	}
	return out
}

// BenchmarkPodEvent is what one pod update costs one of the set's
// handlers on top of the handler's own work (here none): untracked, as the
// informer calls the handler of a Set that does not follow its handlers
// (the scheduler's), and tracked by podEvents (TrackPods, the differential
// driver's).
func BenchmarkPodEvent(b *testing.B) {
	pods := eventPods(4096)
	deliver := func(b *testing.B, h cache.ResourceEventHandler) {
		b.ResetTimer()
		for i := range b.N {
			h.OnUpdate(pods[(i+4095)%4096], pods[i%4096])
		}
	}
	b.Run("untracked", func(b *testing.B) {
		under := &capturingInformer{}
		deliver(b, handlers(under, under, 1)[0])
	})
	b.Run("tracked", func(b *testing.B) {
		under := &capturingInformer{}
		var e podEvents
		deliver(b, handlers(e.track(under), under, 1)[0])
	})
}
