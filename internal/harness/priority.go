package harness

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// CreatePriorityClass creates pc (one that already exists will do) and
// returns once the apiserver admits objects that name it. The Priority
// admission plugin resolves a class name from an informer cache, not from
// storage, so for a while after the create it still refuses pods and pod
// groups naming the class as Forbidden. A dry-run pod in namespace naming
// the class goes through that admission and stores nothing.
func CreatePriorityClass(ctx context.Context, client kubernetes.Interface, namespace string, pc *schedulingv1.PriorityClass) error {
	_, err := client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create priority class %s: %w", pc.Name, err)
	}
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "priority-probe-", Namespace: namespace},
		Spec: corev1.PodSpec{
			PriorityClassName: pc.Name,
			Containers:        []corev1.Container{{Name: "probe", Image: "probe"}},
		},
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	// The cache catches up within milliseconds on a quiet apiserver; the
	// backoff allows for a loaded one and still gives up on one whose
	// informer never syncs.
	backoff := wait.Backoff{Duration: 5 * time.Millisecond, Factor: 2, Cap: time.Second, Steps: 40}
	var last error
	err = wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		_, last = client.CoreV1().Pods(namespace).Create(ctx, probe, dryRun)
		if unknownPriorityClass(last, pc.Name) {
			return false, nil
		}
		return true, last
	})
	if wait.Interrupted(err) && last != nil {
		err = last
	}
	if err != nil {
		return fmt.Errorf("priority class %s not admitted: %w", pc.Name, err)
	}
	return nil
}

// unknownPriorityClass reports whether err is the Priority admission
// plugin's refusal of an object naming class, which it has not (yet) seen.
func unknownPriorityClass(err error, class string) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "no PriorityClass with name "+class+" was found")
}
