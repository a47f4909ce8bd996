// Package api is schedloop's read-only JSON API (/api/v1/...), served with
// gin by the collector next to the dashboard that calls it. It parses and
// checks every request parameter, reads the store's rollup tables and
// views through named queries, and never builds SQL from request text.
//
// It must not write to the database, and must not read raw GPU samples.
package api

import (
	"context"
	"crypto/subtle"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/etaserve"
	"github.com/schedloop/schedloop/internal/predict"
	"github.com/schedloop/schedloop/internal/profile"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/tuner"
	"github.com/schedloop/schedloop/internal/why"
)

// OpenAPI is the API's description, served at /api/v1/openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte

// Options configure the API.
type Options struct {
	// Token, when set, must be presented as "Authorization: Bearer <token>".
	Token string
	// AuthHeader, when set, names a header that an authenticating reverse
	// proxy sets (e.g. X-Forwarded-User); a request carrying it is let in.
	AuthHeader string
	// IdleThreshold is the engine activity below which a held GPU is idle;
	// default store.DefaultIdleThreshold.
	IdleThreshold float64
	// Cluster names the cluster in group_by=cluster answers; default "cluster".
	Cluster string
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Timeout bounds each request's database work; default 15s.
	Timeout time.Duration
	// MaxConcurrent bounds the requests reading the database and building
	// their answers at once; default DefaultMaxConcurrent. Each holds a
	// connection of the store's pool and the memory of one answer, so this
	// bound, not the number of clients, sets what reads cost the process.
	MaxConcurrent int
	// QueueWait is how long a request waits for one of those places before
	// it is answered 429 with Retry-After; default DefaultQueueWait.
	QueueWait time.Duration
	// Log receives one line per failed request; default slog.Default().
	Log *slog.Logger
	// TrustedProxies are the addresses AuthHeader is believed from; a
	// request from anywhere else must present the token. AuthHeader without
	// TrustedProxies lets no one in by header.
	TrustedProxies []netip.Prefix
	// ETA answers the wait estimates and what-ifs; nil estimates from the
	// store with etaserve's defaults.
	ETA *etaserve.Service
}

// Defaults of Options.
const (
	DefaultMaxConcurrent = 4
	DefaultQueueWait     = 2 * time.Second
)

type handler struct {
	etas *etaserve.Service
	st   *store.Store
	opts Options
	why  why.Builder
	// slots holds a token per request being answered (see MaxConcurrent).
	slots chan struct{}
}

// Register mounts the API under /api/v1 on r. Only GET (and HEAD) are
// answered, and POST to /whatif, which reads too: the API is read-only.
func Register(r *gin.Engine, st *store.Store, opts Options) {
	if opts.IdleThreshold <= 0 {
		opts.IdleThreshold = store.DefaultIdleThreshold
	}
	if opts.Cluster == "" {
		opts.Cluster = "cluster"
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 15 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = DefaultMaxConcurrent
	}
	if opts.QueueWait <= 0 {
		opts.QueueWait = DefaultQueueWait
	}
	if opts.ETA == nil {
		opts.ETA = &etaserve.Service{Store: st, Now: opts.Now}
	}
	h := &handler{etas: opts.ETA, st: st, opts: opts, why: why.Builder{Store: st, Threshold: opts.IdleThreshold, Now: opts.Now},
		slots: make(chan struct{}, opts.MaxConcurrent)}
	r.HandleMethodNotAllowed = true
	openapi := func(c *gin.Context) { c.Data(http.StatusOK, "application/yaml", OpenAPI) }
	r.GET("/api/v1/openapi.yaml", h.authorize, openapi)
	r.HEAD("/api/v1/openapi.yaml", h.authorize, openapi)
	g := r.Group("/api/v1", h.authorize, h.checkQuery, h.admit)
	for path, fn := range map[string]gin.HandlerFunc{
		"/idle":          h.idle,
		"/idle/groups":   h.idleGroups,
		"/idle/heatmap":  h.idleHeatmap,
		"/idle/holders":  h.idleHolders,
		"/wait/reasons":  h.waitReasons,
		"/search":        h.search,
		"/why":           h.whyQuery,
		"/why/pods/:uid": h.whyPod,
		"/why/jobs/:uid": h.whyJob,
		"/profiles":      h.profiles,
		"/profiles/diff": h.profileDiff,
		"/profiles/:id":  h.profile,
		"/gpus":          h.gpus,
		"/reservations":  h.reservations,
		"/eta":           h.eta,
		"/eta/jobs/:uid": h.etaJob,
		"/queues":        h.queues,
	} {
		g.GET(path, fn)
		g.HEAD(path, fn)
	}
	// A what-if carries a manifest, so it is a POST, but it only reads:
	// nothing is created in the cluster or the database.
	g.POST("/whatif", h.whatIf)
	r.NoMethod(func(c *gin.Context) {
		c.JSON(http.StatusMethodNotAllowed, gin.H{"error": fmt.Sprintf("method %s: this API is read-only (GET)", c.Request.Method)})
	})
}

// NewRouter is a gin engine with only the API, for tests and benchmarks.
func NewRouter(st *store.Store, opts Options) http.Handler {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(gin.Recovery())
	Register(r, st, opts)
	return r
}

// NotFound answers a path under /api/v1 that the API does not serve; the
// collector routes unknown /api/ paths here rather than to the dashboard.
func NotFound(c *gin.Context) {
	c.AbortWithStatusJSON(http.StatusNotFound, gin.H{"error": fmt.Sprintf("path %s: no such API endpoint (see /api/v1/openapi.yaml)", c.Request.URL.Path)})
}

func (h *handler) authorize(c *gin.Context) {
	if h.opts.Token == "" && h.opts.AuthHeader == "" {
		return
	}
	if h.opts.AuthHeader != "" && c.GetHeader(h.opts.AuthHeader) != "" && h.fromTrustedProxy(c) {
		return
	}
	if h.opts.Token != "" {
		// The scheme is case-insensitive (RFC 9110 section 11.1).
		scheme, got, ok := strings.Cut(c.GetHeader("Authorization"), " ")
		if ok && strings.EqualFold(scheme, "Bearer") &&
			subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(h.opts.Token)) == 1 {
			return
		}
	}
	c.Header("WWW-Authenticate", `Bearer realm="schedloop"`)
	c.AbortWithStatusJSON(http.StatusUnauthorized, gin.H{"error": "authentication required: send Authorization: Bearer <token>" +
		map[bool]string{true: " or come through the authenticating proxy", false: ""}[h.opts.AuthHeader != ""]})
}

// fromTrustedProxy says the request came straight from an address in
// TrustedProxies: only the authenticating proxy may vouch for a user with
// AuthHeader, not any client that sends the header itself.
func (h *handler) fromTrustedProxy(c *gin.Context) bool {
	host, _, err := net.SplitHostPort(c.Request.RemoteAddr)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	ip = ip.Unmap()
	for _, p := range h.opts.TrustedProxies {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// maxQueryParams is Go's own limit on query parameters (net/url): past it
// URL.Query() silently returns nothing, and a request would be answered
// with its filters dropped.
const maxQueryParams = 10_000

// checkQuery refuses a query string that does not parse, rather than
// answering as if it had no parameters.
func (h *handler) checkQuery(c *gin.Context) {
	if _, err := url.ParseQuery(c.Request.URL.RawQuery); err != nil {
		if n := strings.Count(c.Request.URL.RawQuery, "&") + strings.Count(c.Request.URL.RawQuery, ";") + 1; n > maxQueryParams {
			err = fmt.Errorf("%d parameters, over the %d this API reads", n, maxQueryParams)
		}
		c.AbortWithStatusJSON(http.StatusBadRequest, gin.H{"error": fmt.Sprintf("query string: %v", err)})
	}
}

// admit holds one of MaxConcurrent places while the request is answered,
// waiting QueueWait at most: a read storm queues briefly, then is told to
// come back (429), and neither the pool ingest writes through nor the process's
// memory is taken by it.
func (h *handler) admit(c *gin.Context) {
	t := time.NewTimer(h.opts.QueueWait)
	defer t.Stop()
	select {
	case h.slots <- struct{}{}:
	case <-t.C:
		h.busy(c, http.StatusTooManyRequests, fmt.Sprintf("%d requests are being answered, the most at once; try again shortly", h.opts.MaxConcurrent))
		return
	case <-c.Request.Context().Done():
		c.Abort()
		return
	}
	defer func() { <-h.slots }()
	c.Next()
}

// busy answers code (429: too many requests at once; 503: the database is
// too slow) with Retry-After: the request was fine, the moment was not.
func (h *handler) busy(c *gin.Context, code int, why string) {
	c.Header("Retry-After", strconv.Itoa(max(1, int(h.opts.QueueWait.Seconds()))))
	c.AbortWithStatusJSON(code, gin.H{"error": why})
}

// query parses the common parameters or answers 400.
func (h *handler) query(c *gin.Context) (Query, bool) {
	q, err := ParseQuery(c.Request.URL.Query(), h.opts.Now())
	if err != nil {
		c.AbortWithStatusJSON(http.StatusBadRequest, gin.H{"error": err.Error()})
		return q, false
	}
	return q, true
}

func (h *handler) ctx(c *gin.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.Request.Context(), h.opts.Timeout)
}

func (h *handler) fail(c *gin.Context, err error) {
	var pe *ParamError
	switch {
	case errors.As(err, &pe):
		c.AbortWithStatusJSON(http.StatusBadRequest, gin.H{"error": err.Error()})
	case errors.Is(err, why.ErrNotFound), errors.Is(err, store.ErrNotFound):
		c.AbortWithStatusJSON(http.StatusNotFound, gin.H{"error": err.Error()})
	case errors.Is(err, context.DeadlineExceeded) && c.Request.Context().Err() == nil:
		// The database did not answer within Timeout: it is busy, and the
		// same request may well be answered later.
		h.opts.Log.Warn("api request timed out", "path", c.Request.URL.Path, "timeout", h.opts.Timeout)
		h.busy(c, http.StatusServiceUnavailable, fmt.Sprintf("the database did not answer within %v; try again shortly", h.opts.Timeout))
	default:
		h.opts.Log.Error("api request failed", "path", c.Request.URL.Path, "err", err)
		c.AbortWithStatusJSON(http.StatusInternalServerError, gin.H{"error": "reading the database failed; the collector's log says why"})
	}
}

// States is GPU time per idle category, in GPU-hours.
type States struct {
	Busy               float64 `json:"busy"`
	AllocatedIdle      float64 `json:"allocated_idle"`
	UnallocatedWaiting float64 `json:"unallocated_waiting"`
	Spare              float64 `json:"spare"`
}

func hours(m store.UsageMinutes) States {
	return States{Busy: float64(m.Busy) / 60, AllocatedIdle: float64(m.AllocatedIdle) / 60,
		UnallocatedWaiting: float64(m.UnallocatedWaiting) / 60, Spare: float64(m.Spare) / 60}
}

type rangeJSON struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	Step string    `json:"step"`
}

func rangeOf(q Query) rangeJSON { return rangeJSON{q.From, q.To, q.StepName()} }

type seriesPoint struct {
	T time.Time `json:"t"`
	States
}

type idleResponse struct {
	Range     rangeJSON     `json:"range"`
	Totals    States        `json:"totals"`
	GPUHours  float64       `json:"gpu_hours"`
	IdleShare float64       `json:"idle_share"`
	Series    []seriesPoint `json:"series"`
}

func (h *handler) idle(c *gin.Context) {
	q, ok := h.query(c)
	if !ok {
		return
	}
	ctx, cancel := h.ctx(c)
	defer cancel()
	pts, err := h.st.UsageSeries(ctx, q.Filter(), q.Step)
	if err != nil {
		h.fail(c, err)
		return
	}
	var total store.UsageMinutes
	out := idleResponse{Range: rangeOf(q), Series: make([]seriesPoint, 0, len(pts))}
	for _, p := range pts {
		total.Busy += p.Busy
		total.AllocatedIdle += p.AllocatedIdle
		total.UnallocatedWaiting += p.UnallocatedWaiting
		total.Spare += p.Spare
		out.Series = append(out.Series, seriesPoint{T: p.Time, States: hours(p.UsageMinutes)})
	}
	out.Totals, out.GPUHours, out.IdleShare = hours(total), float64(total.Total())/60, total.IdleShare()
	c.JSON(http.StatusOK, out)
}

type groupJSON struct {
	Key string `json:"key"`
	States
	GPUHours  float64 `json:"gpu_hours"`
	IdleShare float64 `json:"idle_share"`
}

func (h *handler) idleGroups(c *gin.Context) {
	q, ok := h.query(c)
	if !ok {
		return
	}
	off, err := q.offset()
	if err != nil {
		h.fail(c, err)
		return
	}
	ctx, cancel := h.ctx(c)
	defer cancel()
	groups, err := h.st.UsageByGroup(ctx, q.Filter(), q.Step, q.GroupBy, q.Limit+1, off)
	if err != nil {
		h.fail(c, err)
		return
	}
	next := ""
	if len(groups) > q.Limit {
		groups, next = groups[:q.Limit], encodeCursor("o"+strconv.Itoa(off+q.Limit))
	}
	out := make([]groupJSON, 0, len(groups))
	for _, g := range groups {
		key := g.Key
		if q.GroupBy == store.ByCluster {
			key = h.opts.Cluster
		}
		out = append(out, groupJSON{Key: key, States: hours(g.UsageMinutes), GPUHours: float64(g.Total()) / 60, IdleShare: g.IdleShare()})
	}
	c.JSON(http.StatusOK, gin.H{"range": rangeOf(q), "group_by": q.GroupBy, "groups": out, "next_cursor": next})
}

type heatRow struct {
	Node     string `json:"node"`
	GPUModel string `json:"gpu_model"`
	// IdleShare per bucket; null where the node reported nothing.
	IdleShare []*float64 `json:"idle_share"`
	GPUHours  []float64  `json:"gpu_hours"`
}

// maxHeatmapCells caps a heatmap answer (nodes × buckets): about 16 MB of
// JSON at most, built by at most MaxConcurrent requests at once.
const maxHeatmapCells = 200_000

func (h *handler) idleHeatmap(c *gin.Context) {
	q, ok := h.query(c)
	if !ok {
		return
	}
	if buckets := int(q.To.Sub(q.From) / q.Step.Duration()); buckets*q.Limit > maxHeatmapCells {
		h.fail(c, perr("limit", strconv.Itoa(q.Limit), "times %d %s buckets is %d cells, over the %d a heatmap answers: use step=1d, a shorter range or a smaller limit",
			buckets, q.StepName(), buckets*q.Limit, maxHeatmapCells))
		return
	}
	ctx, cancel := h.ctx(c)
	defer cancel()
	cells, err := h.st.UsageHeatmap(ctx, q.Filter(), q.Step, q.Cursor, q.Limit)
	if err != nil {
		h.fail(c, err)
		return
	}
	var buckets []time.Time
	for t := q.From; t.Before(q.To); t = t.Add(q.Step.Duration()) {
		buckets = append(buckets, t)
	}
	rows := []heatRow{}
	for _, cell := range cells {
		if len(rows) == 0 || rows[len(rows)-1].Node != cell.Node {
			rows = append(rows, heatRow{Node: cell.Node, GPUModel: cell.GPUModel,
				IdleShare: make([]*float64, len(buckets)), GPUHours: make([]float64, len(buckets))})
		}
		i := int(cell.Time.Sub(q.From) / q.Step.Duration())
		if i < 0 || i >= len(buckets) {
			continue
		}
		share := cell.IdleShare()
		r := &rows[len(rows)-1]
		r.IdleShare[i], r.GPUHours[i] = &share, float64(cell.Total())/60
	}
	next := ""
	if len(rows) == q.Limit {
		next = encodeCursor(rows[len(rows)-1].Node)
	}
	c.JSON(http.StatusOK, gin.H{"range": rangeOf(q), "buckets": buckets, "nodes": rows, "next_cursor": next})
}

type holderJSON struct {
	JobUID    string  `json:"job_uid,omitempty"`
	Namespace string  `json:"namespace"`
	Name      string  `json:"name"`
	Kind      string  `json:"kind"`
	Queue     string  `json:"queue,omitempty"`
	Pods      int     `json:"pods"`
	Nodes     int     `json:"nodes"`
	IdleHours float64 `json:"idle_gpu_hours"`
	BusyHours float64 `json:"busy_gpu_hours"`
	IdleShare float64 `json:"idle_share"`
}

func (h *handler) idleHolders(c *gin.Context) {
	q, ok := h.query(c)
	if !ok {
		return
	}
	off, err := q.offset()
	if err != nil {
		h.fail(c, err)
		return
	}
	ctx, cancel := h.ctx(c)
	defer cancel()
	// Holders are counted per hour; align to hours even when the step is a day.
	f := q.Filter()
	f.From, f.To = store.Hourly.Align(q.From, q.To)
	hs, err := h.st.IdleHolders(ctx, f, q.Limit+1, off)
	if err != nil {
		h.fail(c, err)
		return
	}
	next := ""
	if len(hs) > q.Limit {
		hs, next = hs[:q.Limit], encodeCursor("o"+strconv.Itoa(off+q.Limit))
	}
	out := make([]holderJSON, 0, len(hs))
	for _, x := range hs {
		kind := "job"
		if x.JobUID == "" {
			kind = "pod"
		}
		out = append(out, holderJSON{JobUID: x.JobUID, Namespace: x.Namespace, Name: x.Name, Kind: kind, Queue: x.Queue,
			Pods: x.Pods, Nodes: x.Nodes, IdleHours: float64(x.IdleMinutes) / 60, BusyHours: float64(x.BusyMinutes) / 60,
			IdleShare: float64(x.IdleMinutes) / math.Max(float64(x.IdleMinutes+x.BusyMinutes), 1)})
	}
	c.JSON(http.StatusOK, gin.H{"range": rangeOf(q), "holders": out, "next_cursor": next})
}

type reasonTotalJSON struct {
	Category string  `json:"category"`
	Title    string  `json:"title"`
	PodHours float64 `json:"pod_hours"`
	Share    float64 `json:"share"`
	MaxPods  int     `json:"max_pods_in_an_hour"`
}

type reasonPointJSON struct {
	T        time.Time          `json:"t"`
	PodHours map[string]float64 `json:"pod_hours"`
}

func (h *handler) waitReasons(c *gin.Context) {
	q, ok := h.query(c)
	if !ok {
		return
	}
	if len(q.Nodes) > 0 || len(q.GPUModels) > 0 || len(q.NodeLabels) > 0 {
		h.fail(c, perr("node", strings.Join(q.Nodes, ","), "cannot filter waiting pods (they hold no node); use namespace or queue"))
		return
	}
	ctx, cancel := h.ctx(c)
	defer cancel()
	f := store.WaitFilter{From: q.From, To: q.To, Namespaces: q.Namespaces, Queues: q.Queues}
	totals, err := h.st.WaitReasonTotals(ctx, f)
	if err != nil {
		h.fail(c, err)
		return
	}
	series, err := h.st.WaitReasonSeries(ctx, f, q.Step)
	if err != nil {
		h.fail(c, err)
		return
	}
	var all float64
	for _, t := range totals {
		all += t.Seconds
	}
	out := struct {
		Range    rangeJSON         `json:"range"`
		PodHours float64           `json:"pod_hours"`
		Totals   []reasonTotalJSON `json:"totals"`
		Series   []reasonPointJSON `json:"series"`
	}{Range: rangeOf(q), PodHours: all / 3600, Totals: []reasonTotalJSON{}, Series: []reasonPointJSON{}}
	for _, t := range totals {
		out.Totals = append(out.Totals, reasonTotalJSON{Category: t.Category, Title: why.Title(t.Category),
			PodHours: t.Seconds / 3600, Share: t.Seconds / math.Max(all, 1e-9), MaxPods: t.MaxPods})
	}
	for _, p := range series {
		pt := reasonPointJSON{T: p.Time, PodHours: map[string]float64{}}
		for k, v := range p.Seconds {
			pt.PodHours[k] = v / 3600
		}
		out.Series = append(out.Series, pt)
	}
	c.JSON(http.StatusOK, out)
}

func (h *handler) search(c *gin.Context) {
	q, ok := h.query(c)
	if !ok {
		return
	}
	text, kind := c.Query("q"), c.Query("kind")
	if len(text) > 2*maxValueLen || !queryRE.MatchString(text) {
		h.fail(c, perr("q", text, "is not a pod or job name, namespace/name or UID"))
		return
	}
	if kind != "" && kind != "pod" && kind != "job" {
		h.fail(c, perr("kind", kind, "is not pod or job"))
		return
	}
	ctx, cancel := h.ctx(c)
	defer cancel()
	ms, err := h.st.FindWorkloadsOfKind(ctx, kind, text, q.Cursor, q.Limit+1)
	if err != nil {
		h.fail(c, err)
		return
	}
	next := ""
	if len(ms) > q.Limit {
		ms, next = ms[:q.Limit], encodeCursor(ms[q.Limit-1].SortKey())
	}
	type result struct {
		Kind      string    `json:"kind"`
		UID       string    `json:"uid"`
		Namespace string    `json:"namespace"`
		Name      string    `json:"name"`
		Phase     string    `json:"phase"`
		Created   time.Time `json:"created"`
	}
	out := make([]result, 0, len(ms))
	for _, m := range ms {
		out = append(out, result{m.Kind, m.UID, m.Namespace, m.Name, m.Phase, m.Created})
	}
	c.JSON(http.StatusOK, gin.H{"results": out, "next_cursor": next})
}

// queryRE is what a person may type to find a pod or job: a UID, a name or
// its beginning, optionally after "namespace/".
var (
	queryRE        = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9._-]*)?$`)
	searchPrefixRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
)

func (h *handler) whyQuery(c *gin.Context) {
	text, kind := c.Query("q"), c.Query("kind")
	if len(text) > 2*maxValueLen || !queryRE.MatchString(text) {
		h.fail(c, perr("q", text, "is not a pod or job name, namespace/name or UID"))
		return
	}
	if kind != "" && kind != "pod" && kind != "job" {
		h.fail(c, perr("kind", kind, "is not pod or job"))
		return
	}
	ctx, cancel := h.ctx(c)
	defer cancel()
	m, err := h.why.Resolve(ctx, text, kind)
	if err != nil {
		h.fail(c, err)
		return
	}
	h.story(c, ctx, m.Kind, m.UID)
}

func (h *handler) whyPod(c *gin.Context) {
	ctx, cancel := h.ctx(c)
	defer cancel()
	h.story(c, ctx, "pod", c.Param("uid"))
}

func (h *handler) whyJob(c *gin.Context) {
	ctx, cancel := h.ctx(c)
	defer cancel()
	h.story(c, ctx, "job", c.Param("uid"))
}

func (h *handler) story(c *gin.Context, ctx context.Context, kind, uid string) {
	if uid == "" || len(uid) > maxValueLen || !searchPrefixRE.MatchString(uid) {
		h.fail(c, perr("uid", uid, "is not a UID"))
		return
	}
	var st why.Story
	var err error
	if kind == "job" {
		st, err = h.why.Job(ctx, uid)
	} else {
		st, err = h.why.Pod(ctx, uid)
	}
	if err != nil {
		h.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, st)
}

type profileJSON struct {
	ID                 int64                           `json:"id"`
	Name               string                          `json:"name"`
	Status             string                          `json:"status"`
	Weights            map[string]float64              `json:"weights"`
	QueueLimits        map[string]schedloop.QueueLimit `json:"queue_limits"`
	GangTimeoutSeconds int                             `json:"gang_timeout_seconds"`
	Predicted          map[string]float64              `json:"predicted"`
	Measured           map[string]float64              `json:"measured"`
	Evidence           map[string]any                  `json:"evidence,omitempty"`
	// Seed and Verify come from the evidence: the seed the tuner replayed
	// under and the command that replays it again.
	Seed   string `json:"seed,omitempty"`
	Verify string `json:"verify,omitempty"`
	// Prediction, from the evidence, is how well the run-time predictor
	// the profile orders and reserves by did on the held-out history.
	Prediction *predict.Accuracy `json:"prediction,omitempty"`
	ParentID   int64             `json:"parent_id,omitempty"`
	Reason     string            `json:"reason,omitempty"`
	Created    time.Time         `json:"created"`
	Applied    *time.Time        `json:"applied,omitempty"`
}

func toProfileJSON(p schedloop.Profile, evidence bool) profileJSON {
	out := profileJSON{ID: p.ID, Name: p.Name, Status: string(p.Status), Weights: nonNil(p.Weights),
		QueueLimits: p.QueueLimits, GangTimeoutSeconds: p.GangTimeoutSeconds, Predicted: nonNil(p.Predicted),
		Measured: nonNil(p.Measured), ParentID: p.ParentID, Reason: p.Reason, Created: p.Created}
	if out.QueueLimits == nil {
		out.QueueLimits = map[string]schedloop.QueueLimit{}
	}
	if evidence {
		out.Evidence = p.Evidence
	}
	// Evidence from before seeded runs has no seed: nothing to verify.
	r, err := tuner.ReportFromEvidence(p.Evidence)
	if len(p.Evidence) > 0 && err == nil && r.Inputs.Seed != 0 {
		r.Name = p.Name
		out.Seed, out.Verify = strconv.FormatUint(r.Inputs.Seed, 10), r.VerifyCommand()
	}
	// Evidence from before the predictor was measured has no held-out jobs.
	if err == nil && r.Prediction.Jobs > 0 {
		a := r.Prediction
		out.Prediction = &a
	}
	if !p.Applied.IsZero() {
		a := p.Applied
		out.Applied = &a
	}
	return out
}

func nonNil(m map[string]float64) map[string]float64 {
	if m == nil {
		return map[string]float64{}
	}
	return m
}

var statuses = []schedloop.ProfileStatus{schedloop.ProfileProposed, schedloop.ProfileApplied,
	schedloop.ProfileRolledBack, schedloop.ProfileRejected, schedloop.ProfileSuperseded}

func (h *handler) profiles(c *gin.Context) {
	q, ok := h.query(c)
	if !ok {
		return
	}
	status := schedloop.ProfileStatus(c.Query("status"))
	if status != "" && !slices.Contains(statuses, status) {
		h.fail(c, perr("status", string(status), "is not one of proposed, applied, rolled_back, rejected, superseded"))
		return
	}
	var before int64
	if q.Cursor != "" {
		n, err := strconv.ParseInt(strings.TrimPrefix(q.Cursor, "i"), 10, 64)
		if err != nil || !strings.HasPrefix(q.Cursor, "i") || n <= 0 {
			h.fail(c, perr("cursor", c.Query("cursor"), "is not a cursor of the profile list"))
			return
		}
		before = n
	}
	ctx, cancel := h.ctx(c)
	defer cancel()
	ps, err := h.st.ListProfilesBefore(ctx, status, before, q.Limit+1)
	if err != nil {
		h.fail(c, err)
		return
	}
	next := ""
	if len(ps) > q.Limit {
		ps, next = ps[:q.Limit], encodeCursor("i"+strconv.FormatInt(ps[q.Limit-1].ID, 10))
	}
	out := make([]profileJSON, 0, len(ps))
	for _, p := range ps {
		out = append(out, toProfileJSON(p, false))
	}
	c.JSON(http.StatusOK, gin.H{"profiles": out, "next_cursor": next})
}

func profileID(param, s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, perr(param, s, "is not a profile ID (a positive whole number)")
	}
	return n, nil
}

func (h *handler) profile(c *gin.Context) {
	id, err := profileID("id", c.Param("id"))
	if err != nil {
		h.fail(c, err)
		return
	}
	ctx, cancel := h.ctx(c)
	defer cancel()
	p, err := h.st.GetProfile(ctx, id)
	if err != nil {
		h.fail(c, err)
		return
	}
	out := gin.H{"profile": toProfileJSON(p, true)}
	if p.ParentID != 0 {
		if parent, err := h.st.GetProfile(ctx, p.ParentID); err == nil {
			out["diff_from_parent"] = diff(parent, p)
		}
	}
	c.JSON(http.StatusOK, out)
}

type termJSON struct {
	Term string   `json:"term"`
	A    *float64 `json:"a"`
	B    *float64 `json:"b"`
}

type diffJSON struct {
	A       int64      `json:"a"`
	B       int64      `json:"b"`
	Changes []string   `json:"changes"`
	Weights []termJSON `json:"weights"`
}

func diff(a, b schedloop.Profile) diffJSON {
	d := diffJSON{A: a.ID, B: b.ID, Changes: profile.Diff(profile.FromDomain(a), profile.FromDomain(b))}
	if d.Changes == nil {
		d.Changes = []string{}
	}
	keys := slices.Sorted(maps.Keys(a.Weights))
	for k := range b.Weights {
		if _, ok := a.Weights[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		t := termJSON{Term: k}
		if v, ok := a.Weights[k]; ok {
			t.A = &v
		}
		if v, ok := b.Weights[k]; ok {
			t.B = &v
		}
		d.Weights = append(d.Weights, t)
	}
	return d
}

func (h *handler) profileDiff(c *gin.Context) {
	a, err := profileID("a", c.Query("a"))
	if err != nil {
		h.fail(c, err)
		return
	}
	b, err := profileID("b", c.Query("b"))
	if err != nil {
		h.fail(c, err)
		return
	}
	ctx, cancel := h.ctx(c)
	defer cancel()
	pa, err := h.st.GetProfile(ctx, a)
	if err != nil {
		h.fail(c, err)
		return
	}
	pb, err := h.st.GetProfile(ctx, b)
	if err != nil {
		h.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, diff(pa, pb))
}

// gpuJSON is one GPU of the inventory with its MIG instances under it.
type gpuJSON struct {
	UUID         string         `json:"uuid"`
	Node         string         `json:"node"`
	Index        int            `json:"index"`
	Model        string         `json:"model"`
	NVLinkDomain string         `json:"nvlink_domain"`
	Instances    []instanceJSON `json:"instances"`
}

// ID is empty for an instance known only from the ResourceSlice that
// publishes it, by its MIG UUID, until telemetry names its GPU instance id.
type instanceJSON struct {
	ID           string  `json:"id"`
	MIGUUID      string  `json:"mig_uuid,omitempty"`
	Profile      string  `json:"profile"`
	ComputeShare float64 `json:"compute_share"`
}

// gpus lists the inventory's GPUs (of the nodes asked for, or all), each
// with its MIG instances, at most limit GPUs.
func (h *handler) gpus(c *gin.Context) {
	q, ok := h.query(c)
	if !ok {
		return
	}
	ctx, cancel := h.ctx(c)
	defer cancel()
	nodes := q.Nodes
	if len(nodes) == 0 {
		nodes = []string{""}
	}
	out := []gpuJSON{}
	truncated := false
	for _, n := range nodes {
		gs, err := h.st.ListGPUs(ctx, n)
		if err != nil {
			h.fail(c, err)
			return
		}
		for _, g := range gs {
			if g.Instance == "" && g.MIGUUID == "" {
				if len(out) == q.Limit {
					truncated = true
					break
				}
				out = append(out, gpuJSON{UUID: g.UUID, Node: g.Node, Index: g.Index, Model: g.Model,
					NVLinkDomain: g.NVLinkDomain, Instances: []instanceJSON{}})
				continue
			}
			// Stored instances passed MIGComputeShare when recorded.
			share, _ := schedloop.MIGComputeShare(g.Model, g.MIGProfile)
			last := &out[len(out)-1]
			last.Instances = append(last.Instances, instanceJSON{ID: g.Instance, MIGUUID: g.MIGUUID, Profile: g.MIGProfile, ComputeShare: share})
		}
	}
	c.JSON(http.StatusOK, gin.H{"gpus": out, "truncated": truncated})
}

// reservationJSON is one standing reservation.
type reservationJSON struct {
	Scheduler string            `json:"scheduler"`
	Job       string            `json:"job"`
	Pod       string            `json:"pod"`
	GPUs      int               `json:"gpus"`
	Nodes     []string          `json:"nodes"`
	Domain    map[string]string `json:"domain"`
	Start     time.Time         `json:"start"`
	Since     time.Time         `json:"since"`
	Planned   time.Time         `json:"planned"`
}

// reservations lists the reservations standing now, from the scheduler's
// Reserved and ReservationReleased Events the collector stored.
func (h *handler) reservations(c *gin.Context) {
	ctx, cancel := h.ctx(c)
	defer cancel()
	rs, err := h.st.ActiveReservations(ctx)
	if err != nil {
		h.fail(c, err)
		return
	}
	out := make([]reservationJSON, 0, len(rs))
	for _, r := range rs {
		out = append(out, reservationJSON{Scheduler: r.Scheduler, Job: r.Job, Pod: r.Pod, GPUs: r.GPUs, Nodes: r.Nodes,
			Domain: r.Domain, Start: r.Start, Since: r.Since, Planned: r.Planned})
	}
	c.JSON(http.StatusOK, gin.H{"reservations": out})
}
