package api

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/schedloop/schedloop/internal/etaserve"
	"github.com/schedloop/schedloop/internal/scoring"
)

// ETAMaxAge is how long an estimate of every pending job is served before
// it is made again.
const ETAMaxAge = 30 * time.Second

// cachedETA is the estimate of every pending job the API serves, or false
// when the request was answered with the error.
func (h *handler) cachedETA(c *gin.Context) (etaserve.Answer, bool) {
	ctx, cancel := h.ctx(c)
	defer cancel()
	a, err := h.etas.Cached(ctx, ETAMaxAge)
	if err != nil {
		h.failETA(c, err)
		return etaserve.Answer{}, false
	}
	return a, true
}

// eta answers every pending job's expected start.
func (h *handler) eta(c *gin.Context) {
	if a, ok := h.cachedETA(c); ok {
		c.JSON(http.StatusOK, a)
	}
}

// etaJob answers one pending job's expected start.
func (h *handler) etaJob(c *gin.Context) {
	uid := c.Param("uid")
	if uid == "" || len(uid) > maxValueLen || !searchPrefixRE.MatchString(uid) {
		h.fail(c, perr("uid", uid, "is not a UID"))
		return
	}
	a, ok := h.cachedETA(c)
	if !ok {
		return
	}
	for _, j := range a.Jobs {
		if j.UID == uid {
			c.JSON(http.StatusOK, gin.H{"at": a.At, "profile": a.Profile, "runs": a.Runs, "job": j})
			return
		}
	}
	c.AbortWithStatusJSON(http.StatusNotFound, gin.H{"error": "job " + uid + ": not pending (or not stored) at " + a.At.Format(time.RFC3339)})
}

// whatIf estimates without submitting: the body, when not empty, is a
// manifest (Pod or Job, JSON or YAML) estimated as if submitted now;
// drain=n1,n2 and queue_limit=queue:gpus[:gangs] change the cluster. It
// writes nothing anywhere.
func (h *handler) whatIf(c *gin.Context) {
	var change etaserve.Change
	q := c.Request.URL.Query()
	if v := q.Get("drain"); v != "" {
		change.Drain = strings.Split(v, ",")
	}
	for _, v := range q["queue_limit"] {
		name, limit, err := parseQueueLimit(v)
		if err != nil {
			h.fail(c, perr("queue_limit", v, "%v", err))
			return
		}
		if change.QueueLimits == nil {
			change.QueueLimits = map[string]scoring.QueueLimit{}
		}
		change.QueueLimits[name] = limit
	}
	members := 0
	if v := q.Get("members"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			h.fail(c, perr("members", v, "is not a positive count"))
			return
		}
		members = n
	}
	body, err := io.ReadAll(io.LimitReader(c.Request.Body, etaserve.MaxManifestBytes+1))
	if err != nil {
		h.fail(c, perr("body", "", "could not be read: %v", err))
		return
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		job, err := etaserve.JobFromManifest(body, members)
		if err != nil {
			h.fail(c, perr("body", "", "%v", err))
			return
		}
		change.Add = &job
	}
	if change.Add == nil && len(change.Drain) == 0 && len(change.QueueLimits) == 0 {
		h.fail(c, perr("body", "", "is empty and no drain or queue_limit is given: nothing to ask"))
		return
	}
	ctx, cancel := h.ctx(c)
	defer cancel()
	a, err := h.etas.WhatIf(ctx, change)
	if err != nil {
		h.failETA(c, err)
		return
	}
	c.JSON(http.StatusOK, a)
}

func (h *handler) failETA(c *gin.Context, err error) {
	var in *etaserve.InputError
	if errors.As(err, &in) {
		h.fail(c, perr(in.Field, "", "%s", in.Problem))
		return
	}
	h.fail(c, err)
}

// parseQueueLimit reads queue:gpus[:gangs].
func parseQueueLimit(v string) (string, scoring.QueueLimit, error) {
	parts := strings.Split(v, ":")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" {
		return "", scoring.QueueLimit{}, errors.New("is not queue:gpus or queue:gpus:gangs")
	}
	var l scoring.QueueLimit
	var err error
	if l.MaxGPUs, err = strconv.Atoi(parts[1]); err != nil || l.MaxGPUs < 0 {
		return "", l, errors.New("GPUs are not a count")
	}
	if len(parts) == 3 {
		if l.MaxRunningGangs, err = strconv.Atoi(parts[2]); err != nil || l.MaxRunningGangs < 0 {
			return "", l, errors.New("gangs are not a count")
		}
	}
	return parts[0], l, nil
}
