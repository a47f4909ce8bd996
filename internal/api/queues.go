package api

import (
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/schedloop/schedloop/internal/profile"
	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/store"
)

// quotaNote is said in every answer: the collector stores Workloads and
// their admissions, not ClusterQueue specs, so nothing stored says how much
// of a queue's use is within its nominal quota.
const quotaNote = "nominal quotas are not stored (the collector keeps Workloads, not ClusterQueue specs): borrowed GPUs are unknown"

type queuedJob struct {
	Position       int       `json:"position"`
	UID            string    `json:"uid"`
	Namespace      string    `json:"namespace"`
	Name           string    `json:"name"`
	Priority       int32     `json:"priority"`
	Members        int       `json:"members"`
	GPUs           float64   `json:"gpus"`
	Created        time.Time `json:"created"`
	WaitingSeconds float64   `json:"waiting_seconds"`
	Wait           string    `json:"wait"`
}

type queueView struct {
	Name              string      `json:"name"`
	Kind              string      `json:"kind"`
	PendingGPUs       float64     `json:"pending_gpus"`
	UsedGPUs          *float64    `json:"used_gpus,omitempty"`
	AdmittedWorkloads *int        `json:"admitted_workloads,omitempty"`
	Pending           []queuedJob `json:"pending"`
}

// queues answers each queue's waiting jobs in the order the applied
// profile's scheduler tries them, and each ClusterQueue's use.
func (h *handler) queues(c *gin.Context) {
	ctx, cancel := h.ctx(c)
	defer cancel()
	now := h.opts.Now()
	params, name := scoring.DefaultParams(), "default"
	if p, err := h.st.AppliedProfile(ctx); err == nil {
		params, name = profile.FromDomain(p).Params(), p.Name
	} else if !errors.Is(err, store.ErrNotFound) {
		h.fail(c, err)
		return
	}
	jobs, err := h.st.QueuedJobs(ctx)
	if err != nil {
		h.fail(c, err)
		return
	}
	use, err := h.st.ClusterQueueUsage(ctx)
	if err != nil {
		h.fail(c, err)
		return
	}
	byName := map[string]*queueView{}
	var names []string
	view := func(name, kind string) *queueView {
		if q := byName[name+"\x00"+kind]; q != nil {
			return q
		}
		q := &queueView{Name: name, Kind: kind, Pending: []queuedJob{}}
		byName[name+"\x00"+kind] = q
		names = append(names, name+"\x00"+kind)
		return q
	}
	keys := map[string]scoring.QueueKey{}
	for _, j := range jobs {
		k := scoring.QueueKey{Priority: j.Priority, Created: j.Created.UnixNano(), Name: j.Name}
		if j.Gang {
			k.Gang = j.Namespace + "/" + j.Name
		}
		keys[j.UID] = k
	}
	// The order is the scheduler's rule, not restated here; the keys it
	// reads beyond priority and arrival (predicted service, attained
	// service) are not derived by this view, see order_note.
	slices.SortStableFunc(jobs, func(a, b store.QueuedJob) int {
		return scoring.CompareOrder(params, now.UnixNano(), keys[a.UID], keys[b.UID])
	})
	for _, j := range jobs {
		q := view(j.Queue, j.QueueKind)
		wait := "capacity"
		if j.QuotaWait {
			wait = "quota"
		}
		q.PendingGPUs += j.GPUs
		q.Pending = append(q.Pending, queuedJob{Position: len(q.Pending) + 1, UID: j.UID, Namespace: j.Namespace, Name: j.Name,
			Priority: j.Priority, Members: j.Members, GPUs: j.GPUs, Created: j.Created,
			WaitingSeconds: max(now.Sub(j.Created), 0).Seconds(), Wait: wait})
	}
	for _, u := range use {
		q := view(u.ClusterQueue, "cluster-queue")
		q.UsedGPUs, q.AdmittedWorkloads = &u.GPUs, &u.Workloads
	}
	for _, q := range byName {
		if q.Kind == "cluster-queue" && q.UsedGPUs == nil {
			zero, none := 0.0, 0
			q.UsedGPUs, q.AdmittedWorkloads = &zero, &none
		}
	}
	slices.Sort(names)
	out := make([]*queueView, len(names))
	for i, n := range names {
		out[i] = byName[n]
	}
	order := string(params.EffectiveOrder())
	answer := gin.H{"at": now, "profile": name, "order": order, "starvation_bound_seconds": params.StarvationBound.Seconds(),
		"quota_note": quotaNote, "queues": out}
	if order != string(scoring.OrderArrival) {
		answer["order_note"] = "positions are by priority, starvation and arrival: the profile's " + order + " key is not derived by this view"
	}
	c.JSON(http.StatusOK, answer)
}
