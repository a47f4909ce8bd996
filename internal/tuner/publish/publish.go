// Package publish is the tuner's Kubernetes side: it writes a profile into
// the ConfigMap the scheduler watches, and runs the tuning loop only while
// this replica holds a Lease (client-go leader election), so two tuners never
// publish at once. It makes no tuning decisions.
package publish

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/schedloop/schedloop/internal/election"
	"github.com/schedloop/schedloop/internal/predict"
	"github.com/schedloop/schedloop/internal/profile"
	"github.com/schedloop/schedloop/internal/tuner"
)

// ProfileAnnotation names the profile a ConfigMap holds, for kubectl users.
const ProfileAnnotation = "schedloop.io/profile"

// ConfigMap writes d under profile.ConfigMapKey into namespace/name,
// creating the ConfigMap or replacing its document, and the predictor
// table d was tuned with under profile.PredictorConfigMapKey (nil removes
// the key: the scheduler then predicts the default run time for every
// job). A table larger than profile.MaxPredictorBytes is trimmed to it
// (predict.Table.Trim: the entries updated longest ago go first) and the
// trim is reported in the returned note. annotations (keys under
// tuner.EvidenceAnnotationPrefix, naming d's evidence) replace the previous
// profile's.
func ConfigMap(ctx context.Context, client kubernetes.Interface, namespace, name string, d profile.Document,
	table *predict.Table, annotations map[string]string) (note string, err error) {
	if err := d.Validate(); err != nil {
		return "", fmt.Errorf("publish profile %s: %w", d.Name, err)
	}
	body, err := d.Marshal()
	if err != nil {
		return "", err
	}
	var tableJSON []byte
	if table != nil {
		t := *table
		t.Entries = slices.Clone(t.Entries)
		dropped, err := t.Trim(profile.MaxPredictorBytes)
		if err != nil {
			return "", fmt.Errorf("publish profile %s: %w", d.Name, err)
		}
		if dropped > 0 {
			note = fmt.Sprintf("predictor table trimmed to %d entries (%d least recently updated dropped) to fit %d bytes",
				len(t.Entries), dropped, profile.MaxPredictorBytes)
		}
		if tableJSON, err = json.Marshal(t); err != nil {
			return "", fmt.Errorf("publish profile %s: predictor table: %w", d.Name, err)
		}
	}
	if n := len(body) + len(tableJSON); n > profile.MaxConfigMapBytes {
		return "", fmt.Errorf("publish profile %s: document and predictor table are %d bytes, over a ConfigMap's %d",
			d.Name, n, profile.MaxConfigMapBytes)
	}
	setData := func(cm *corev1.ConfigMap) {
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[profile.ConfigMapKey] = string(body)
		if tableJSON != nil {
			cm.Data[profile.PredictorConfigMapKey] = string(tableJSON)
		} else {
			delete(cm.Data, profile.PredictorConfigMapKey)
		}
	}
	cms := client.CoreV1().ConfigMaps(namespace)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := cms.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace,
				Labels:      map[string]string{"app.kubernetes.io/managed-by": "schedloop-tuner"},
				Annotations: map[string]string{}}}
			setData(cm)
			setAnnotations(cm, d.Name, annotations)
			_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		setData(cm)
		setAnnotations(cm, d.Name, annotations)
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return "", fmt.Errorf("publish profile %s to ConfigMap %s/%s: %w", d.Name, namespace, name, err)
	}
	return note, nil
}

func setAnnotations(cm *corev1.ConfigMap, profileName string, evidence map[string]string) {
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	for k := range cm.Annotations {
		if strings.HasPrefix(k, tuner.EvidenceAnnotationPrefix) {
			delete(cm.Annotations, k)
		}
	}
	maps.Copy(cm.Annotations, evidence)
	cm.Annotations[ProfileAnnotation] = profileName
}

// ConfigMapPublisher publishes profiles into one ConfigMap.
type ConfigMapPublisher struct {
	Client          kubernetes.Interface
	Namespace, Name string
}

// Publish writes d, its predictor table and its evidence annotations into
// the ConfigMap.
func (p ConfigMapPublisher) Publish(ctx context.Context, d profile.Document, table *predict.Table, annotations map[string]string) (string, error) {
	return ConfigMap(ctx, p.Client, p.Namespace, p.Name, d, table, annotations)
}

// Election configures LeaderElected.
type Election = election.Config

// LeaderElected runs fn whenever this process holds the Lease, until ctx
// ends. fn's context is cancelled when leadership is lost.
func LeaderElected(ctx context.Context, client kubernetes.Interface, e Election, fn func(ctx context.Context)) error {
	return election.Run(ctx, client, e, fn)
}
