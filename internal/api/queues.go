package api

import (
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/profile"
	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/why"
)

// quotaNote is said when a ClusterQueue with waiting or admitted Workloads
// has no stored spec (the collector has not seen it, or Kueue's
// ClusterQueues are not watched): its nominal and borrowed GPUs are unknown.
const quotaNote = "some ClusterQueues' specs are not stored: their nominal and borrowed GPUs are unknown"

// quotaView is one flavour-resource of a ClusterQueue in the resource's
// unit; a missing limit is no limit, as in Kueue's API.
type quotaView struct {
	Flavor         string   `json:"flavor"`
	Resource       string   `json:"resource"`
	Nominal        float64  `json:"nominal"`
	BorrowingLimit *float64 `json:"borrowing_limit,omitempty"`
	LendingLimit   *float64 `json:"lending_limit,omitempty"`
	Reserved       float64  `json:"reserved"`
	Borrowed       float64  `json:"borrowed"`
}

// clusterQueueSpec is what the stored spec says of a ClusterQueue: GPU
// figures summed over its flavours, as Kueue's status last reported them.
type clusterQueueSpec struct {
	Cohort              string      `json:"cohort"`
	FairWeight          float64     `json:"fair_weight"`
	ReclaimWithinCohort string      `json:"reclaim_within_cohort"`
	BorrowWithinCohort  string      `json:"borrow_within_cohort"`
	WithinClusterQueue  string      `json:"within_cluster_queue"`
	NominalGPUs         float64     `json:"nominal_gpus"`
	ReservedGPUs        float64     `json:"reserved_gpus"`
	BorrowedGPUs        float64     `json:"borrowed_gpus"`
	Borrowing           string      `json:"borrowing"`
	Quotas              []quotaView `json:"quotas"`
}

func specView(q schedloop.KueueClusterQueue) *clusterQueueSpec {
	units := func(milli int64) float64 { return float64(milli) / 1000 }
	limit := func(milli *int64) *float64 {
		if milli == nil {
			return nil
		}
		return new(units(*milli))
	}
	s := &clusterQueueSpec{Cohort: q.Cohort, FairWeight: q.FairWeight, ReclaimWithinCohort: q.ReclaimWithinCohort,
		BorrowWithinCohort: q.BorrowWithinCohort, WithinClusterQueue: q.WithinClusterQueue,
		Borrowing: why.Borrowing(q, nil), Quotas: []quotaView{}}
	if s.FairWeight == 0 {
		s.FairWeight = 1 // Kueue's default weight
	}
	for _, r := range q.Quotas {
		s.Quotas = append(s.Quotas, quotaView{Flavor: r.Flavor, Resource: r.Resource, Nominal: units(r.Nominal),
			BorrowingLimit: limit(r.BorrowingLimit), LendingLimit: limit(r.LendingLimit),
			Reserved: units(r.Reserved), Borrowed: units(r.Borrowed)})
		if r.Resource == schedloop.GPUResourceName {
			s.NominalGPUs += units(r.Nominal)
			s.ReservedGPUs += units(r.Reserved)
			s.BorrowedGPUs += units(r.Borrowed)
		}
	}
	return s
}

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
	Name              string   `json:"name"`
	Kind              string   `json:"kind"`
	PendingGPUs       float64  `json:"pending_gpus"`
	UsedGPUs          *float64 `json:"used_gpus,omitempty"`
	AdmittedWorkloads *int     `json:"admitted_workloads,omitempty"`
	// Spec is only for ClusterQueues whose spec the collector stored.
	Spec    *clusterQueueSpec `json:"spec,omitempty"`
	Pending []queuedJob       `json:"pending"`
}

type quotaChangeView struct {
	ClusterQueue string  `json:"cluster_queue"`
	Flavor       string  `json:"flavor"`
	Resource     string  `json:"resource"`
	From         float64 `json:"from"`
	To           float64 `json:"to"`
}

// recommendationView is the tuner's latest ClusterQueue quota proposal in
// the resources' units, with its replayed evidence and the patch the
// operator applies.
func recommendationView(r schedloop.KueueQuotaRecommendation) gin.H {
	changes := []quotaChangeView{}
	for _, ch := range r.Changes {
		changes = append(changes, quotaChangeView{ClusterQueue: ch.ClusterQueue, Flavor: ch.Flavor, Resource: ch.Resource,
			From: float64(ch.From) / 1000, To: float64(ch.To) / 1000})
	}
	return gin.H{"id": r.ID, "created": r.Created, "jobs": r.Jobs, "changes": changes,
		"quota_wait_before_seconds": r.QuotaWaitBeforeS, "quota_wait_after_seconds": r.QuotaWaitAfterS,
		"mean_wait_before_seconds": r.MeanWaitBeforeS, "mean_wait_after_seconds": r.MeanWaitAfterS, "patch": r.Patch}
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
	specs, err := h.st.KueueClusterQueues(ctx)
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
	for _, sp := range specs {
		view(sp.Name, "cluster-queue").Spec = specView(sp)
	}
	unknown := false
	for _, q := range byName {
		if q.Kind == "cluster-queue" && q.UsedGPUs == nil {
			zero, none := 0.0, 0
			q.UsedGPUs, q.AdmittedWorkloads = &zero, &none
		}
		unknown = unknown || (q.Kind == "cluster-queue" && q.Spec == nil)
	}
	slices.Sort(names)
	out := make([]*queueView, len(names))
	for i, n := range names {
		out[i] = byName[n]
	}
	order := string(params.EffectiveOrder())
	answer := gin.H{"at": now, "profile": name, "order": order, "starvation_bound_seconds": params.StarvationBound.Seconds(),
		"queues": out}
	if unknown {
		answer["quota_note"] = quotaNote
	}
	rec, err := h.st.LatestKueueQuotaRecommendation(ctx)
	switch {
	case err == nil:
		answer["quota_recommendation"] = recommendationView(rec)
	case !errors.Is(err, store.ErrNotFound):
		h.fail(c, err)
		return
	}
	if order != string(scoring.OrderArrival) {
		answer["order_note"] = "positions are by priority, starvation and arrival: the profile's " + order + " key is not derived by this view"
	}
	c.JSON(http.StatusOK, answer)
}
