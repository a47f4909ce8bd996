// Package publish is the tuner's Kubernetes side: it writes a profile into
// the ConfigMap the scheduler watches, and runs the tuning loop only while
// this replica holds a Lease (client-go leader election), so two tuners never
// publish at once. It makes no tuning decisions.
package publish

import (
	"context"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/schedloop/schedloop/internal/election"
	"github.com/schedloop/schedloop/internal/profile"
	"github.com/schedloop/schedloop/internal/tuner"
)

// ProfileAnnotation names the profile a ConfigMap holds, for kubectl users.
const ProfileAnnotation = "schedloop.io/profile"

// ConfigMap writes d under profile.ConfigMapKey into namespace/name,
// creating the ConfigMap or replacing its document. annotations (keys under
// tuner.EvidenceAnnotationPrefix, naming d's evidence) replace the previous
// profile's.
func ConfigMap(ctx context.Context, client kubernetes.Interface, namespace, name string, d profile.Document,
	annotations map[string]string) error {
	if err := d.Validate(); err != nil {
		return fmt.Errorf("publish profile %s: %w", d.Name, err)
	}
	body, err := d.Marshal()
	if err != nil {
		return err
	}
	cms := client.CoreV1().ConfigMaps(namespace)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := cms.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace,
				Labels:      map[string]string{"app.kubernetes.io/managed-by": "schedloop-tuner"},
				Annotations: map[string]string{}},
				Data: map[string]string{profile.ConfigMapKey: string(body)}}
			setAnnotations(cm, d.Name, annotations)
			_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[profile.ConfigMapKey] = string(body)
		setAnnotations(cm, d.Name, annotations)
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("publish profile %s to ConfigMap %s/%s: %w", d.Name, namespace, name, err)
	}
	return nil
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

// Publish writes d and its evidence annotations into the ConfigMap.
func (p ConfigMapPublisher) Publish(ctx context.Context, d profile.Document, annotations map[string]string) error {
	return ConfigMap(ctx, p.Client, p.Namespace, p.Name, d, annotations)
}

// Election configures LeaderElected.
type Election = election.Config

// LeaderElected runs fn whenever this process holds the Lease, until ctx
// ends. fn's context is cancelled when leadership is lost.
func LeaderElected(ctx context.Context, client kubernetes.Interface, e Election, fn func(ctx context.Context)) error {
	return election.Run(ctx, client, e, fn)
}
