package profilewatch

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	"github.com/schedloop/schedloop/internal/profile"
)

// Event reasons the watcher writes on the profile ConfigMap.
const (
	ReasonLoaded   = "ProfileLoaded"
	ReasonRejected = "ProfileRejected"
)

// Watcher loads the profile ConfigMap into a Holder whenever it changes.
type Watcher struct {
	Holder    *Holder
	Client    kubernetes.Interface
	Namespace string
	Name      string
	// Recorder receives an Event per swap and per refusal; nil writes none.
	Recorder events.EventRecorder
}

// Start runs an informer on the one ConfigMap until ctx ends and returns
// once it has synced (or ctx ended), so the first profile is in place
// before the first scheduling cycle.
func (w *Watcher) Start(ctx context.Context) error {
	registerMetrics()
	publish(w.Holder.Load())
	factory := informers.NewSharedInformerFactoryWithOptions(w.Client, 0,
		informers.WithNamespace(w.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", w.Name).String()
		}))
	inf := factory.Core().V1().ConfigMaps().Informer()
	logger := klog.FromContext(ctx).WithValues("configMap", klog.KRef(w.Namespace, w.Name))
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.sync(logger, obj) },
		UpdateFunc: func(_, obj any) { w.sync(logger, obj) },
		DeleteFunc: func(any) {
			logger.Info("Profile ConfigMap deleted; keeping the active profile", "profile", w.Holder.Load().Doc.Name)
		},
	})
	if err != nil {
		return fmt.Errorf("watch profile configmap %s/%s: %w", w.Namespace, w.Name, err)
	}
	factory.Start(ctx.Done())
	syncCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced) {
		logger.Info("Profile ConfigMap informer not synced yet; starting with the active profile", "profile", w.Holder.Load().Doc.Name)
	}
	go func() {
		<-ctx.Done()
		factory.Shutdown()
	}()
	return nil
}

func (w *Watcher) sync(logger klog.Logger, obj any) {
	cm, ok := obj.(*v1.ConfigMap)
	if !ok {
		return
	}
	data, ok := cm.Data[profile.ConfigMapKey]
	if !ok {
		w.refuse(logger, cm, fmt.Errorf("profile: data.%s: missing", profile.ConfigMapKey))
		return
	}
	old := w.Holder.Load()
	var table []byte
	if t, ok := cm.Data[profile.PredictorConfigMapKey]; ok {
		table = []byte(t)
	}
	swapped, err := w.Holder.ApplyWithTable([]byte(data), table)
	if err != nil {
		w.refuse(logger, cm, err)
		return
	}
	if !swapped {
		return
	}
	cur := w.Holder.Load()
	reloads.WithLabelValues("success").Inc()
	publish(cur)
	diff := profile.Diff(old.Doc, cur.Doc)
	logger.Info("Scheduling profile swapped", "from", old.Doc.Name, "to", cur.Doc.Name, "generation", cur.Generation, "changes", diff)
	if w.Recorder != nil {
		w.Recorder.Eventf(cm, nil, v1.EventTypeNormal, ReasonLoaded, "LoadProfile",
			"profile %s active (generation %d): %d change(s)", cur.Doc.Name, cur.Generation, len(diff))
	}
}

func (w *Watcher) refuse(logger klog.Logger, cm *v1.ConfigMap, err error) {
	reloads.WithLabelValues("failure").Inc()
	active := w.Holder.Load().Doc.Name
	logger.Error(err, "Scheduling profile refused; keeping the active profile", "active", active)
	if w.Recorder != nil {
		w.Recorder.Eventf(cm, nil, v1.EventTypeWarning, ReasonRejected, "LoadProfile",
			"%v; keeping profile %s", err, active)
	}
}
