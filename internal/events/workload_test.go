package events_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/events"
	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/podgroup"
	"github.com/schedloop/schedloop/internal/podspec"
	"github.com/schedloop/schedloop/internal/store"
)

// TestWorkloadAPIGangIsStoredAsOneJob declares a gang through the Kubernetes
// Workload API (a Workload, the PodGroup made from its template, members
// naming it in spec.schedulingGroup) and walks its members through binding,
// start and end: the collector stores one gang job keyed by the PodGroup,
// both members under it, and the job's lifecycle from its members' times —
// first bound, admitted when minCount are bound, started when minCount
// run, finished when the last ends — as it does for a scheduler-plugins
// PodGroup.
func TestWorkloadAPIGangIsStoredAsOneJob(t *testing.T) {
	c, s := watchWorkloadAPI(t)
	ctx := t.Context()

	workload, pg := podgroup.NewWorkload("default", "train", 2)
	pg.Labels = map[string]string{podspec.LabelQueue: "team-a"}
	if err := podgroup.CreateWorkload(ctx, c.Client, workload, pg); err != nil {
		t.Fatal(err)
	}
	stored, err := c.Client.SchedulingV1beta1().PodGroups("default").Get(ctx, "train", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods := c.Client.CoreV1().Pods("default")
	members := createMembers(t, c, "train", nil, nil)

	// API times an hour ahead are later than anything the watcher observes,
	// so the stored times are exactly these.
	base := time.Now().Truncate(time.Second).Add(time.Hour)
	at := func(s int) metav1.Time { return metav1.NewTime(base.Add(time.Duration(s) * time.Second)) }
	for i, p := range members {
		if err := pods.Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: p.Name},
			Target: corev1.ObjectReference{Kind: "Node", Name: "n1"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		setStatus(t, c, p.Name, func(st *corev1.PodStatus) {
			st.Phase, st.StartTime = corev1.PodRunning, ptr.To(at(20+10*i))
			st.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: at(10 * i)}}
		})
	}
	for i, p := range members {
		setStatus(t, c, p.Name, func(st *corev1.PodStatus) {
			st.Phase = corev1.PodSucceeded
			st.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{
				Terminated: &corev1.ContainerStateTerminated{FinishedAt: at(100 + 50*i)}}}}
		})
	}

	var job schedloop.Job
	waitFor(t, "the gang's job to finish", func(ctx context.Context) (bool, error) {
		jobs, err := s.JobHistory(ctx, time.Time{}, base.Add(time.Hour))
		if err != nil || len(jobs) == 0 {
			return false, err
		}
		job = jobs[0]
		return len(jobs) == 1 && !job.Finished.IsZero(), nil
	})
	want := schedloop.Job{UID: string(stored.UID), Namespace: "default", Name: "train", Kind: schedloop.JobKindGang,
		Queue: "team-a", MinMember: 2, GPUsPerMember: 4,
		FirstScheduled: at(0).Time, Admitted: at(10).Time, Started: at(30).Time, Finished: at(150).Time,
		LastRunBegan: at(10).Time, Phase: schedloop.PhaseSucceeded}
	got := job
	if !got.Created.Equal(stored.CreationTimestamp.Time) && got.Created.Sub(stored.CreationTimestamp.Time) >= time.Second {
		t.Errorf("job created %v, the PodGroup at %v", got.Created, stored.CreationTimestamp.Time)
	}
	got.Created, got.GPUModels, got.CPUMilliPerMember, got.MemoryMiBPerMember = time.Time{}, nil, 0, 0
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("job row\n got %+v\nwant %+v", got, want)
	}

	var rows []string
	r, err := s.Pool().Query(ctx, `SELECT name, job_uid FROM pods ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	for r.Next() {
		var name, jobUID string
		if err := r.Scan(&name, &jobUID); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, name+"@"+jobUID)
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprint([]string{"train-0@" + job.UID, "train-1@" + job.UID}); fmt.Sprint(rows) != want {
		t.Fatalf("member rows %v, want %v", rows, want)
	}
}

// watchWorkloadAPI runs a watcher over a cluster serving the Workload API,
// storing into a fresh database, until the test ends.
func watchWorkloadAPI(t *testing.T) (*harness.Cluster, *store.Store) {
	t.Helper()
	c := harness.NewForTest(t, harness.Options{WorkloadAPI: true})
	w, s := events.NewTestWatcher(t, c, events.WatchOptions{Dynamic: c.Dynamic, FlushInterval: 50 * time.Millisecond})
	t.Cleanup(runWatcher(context.Background(), t, w))
	return c, s
}

// createMembers creates two 4-GPU pods group-0 and group-1 naming the
// Workload API PodGroup group, with labels[i] on pod i.
func createMembers(t *testing.T, c *harness.Cluster, group string, labels ...map[string]string) []*corev1.Pod {
	t.Helper()
	var members []*corev1.Pod
	for i := range 2 {
		p, err := c.Client.CoreV1().Pods("default").Create(t.Context(), &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", group, i), Labels: labels[i]},
			Spec: corev1.PodSpec{SchedulerName: "nobody",
				SchedulingGroup: &corev1.PodSchedulingGroup{PodGroupName: ptr.To(group)},
				Containers: []corev1.Container{{Name: "main", Image: "x", Resources: corev1.ResourceRequirements{
					Limits: corev1.ResourceList{schedloop.GPUResourceName: resource.MustParse("4")}}}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		members = append(members, p)
	}
	return members
}

// A queue label set only on the Workload is the gang's queue and its
// members', except a member's own label, which wins
// (podspec.WithGroupMeta); a label added to the Workload later is applied
// to the stored rows.
func TestWorkloadLabelsAreInherited(t *testing.T) {
	c, s := watchWorkloadAPI(t)
	ctx := t.Context()
	workload, pg := podgroup.NewWorkload("default", "tune", 2)
	if err := podgroup.CreateWorkload(ctx, c.Client, workload, pg); err != nil {
		t.Fatal(err)
	}
	createMembers(t, c, "tune", nil, map[string]string{podspec.LabelQueue: "own"})
	queues := func(ctx context.Context) (string, error) {
		var job string
		if err := s.Pool().QueryRow(ctx, `SELECT queue FROM jobs WHERE name = 'tune'`).Scan(&job); err != nil {
			return "", nil
		}
		var pods []string
		r, err := s.Pool().Query(ctx, `SELECT name || '=' || queue FROM pods ORDER BY name`)
		if err != nil {
			return "", err
		}
		defer r.Close()
		for r.Next() {
			var p string
			if err := r.Scan(&p); err != nil {
				return "", err
			}
			pods = append(pods, p)
		}
		return fmt.Sprintf("job=%s %v", job, pods), r.Err()
	}
	wait := func(want string) {
		t.Helper()
		var got string
		waitFor(t, want, func(ctx context.Context) (bool, error) {
			var err error
			got, err = queues(ctx)
			return got == want, err
		})
	}
	wait("job= [tune-0= tune-1=own]")
	stored, err := c.Client.SchedulingV1beta1().Workloads("default").Get(ctx, "tune", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stored.Labels = map[string]string{podspec.LabelQueue: "team-w"}
	if _, err := c.Client.SchedulingV1beta1().Workloads("default").Update(ctx, stored, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("job=team-w [tune-0=team-w tune-1=own]")
}

func setStatus(t *testing.T, c *harness.Cluster, name string, edit func(*corev1.PodStatus)) {
	t.Helper()
	pods := c.Client.CoreV1().Pods("default")
	p, err := pods.Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	edit(&p.Status)
	if _, err := pods.UpdateStatus(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
