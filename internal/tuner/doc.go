// Package tuner turns a cluster's history into a scheduler profile with the
// evidence that chose it: it replays the workload through internal/sim under
// candidate parameters (score-term weights, queue limits, gang timeout),
// searches for a better candidate on the earlier part of the history,
// checks it on held-out later days, and decides, under stated guardrails,
// whether it may be published and whether a published profile must be
// rolled back.
//
// It does no I/O of its own: the store, the apiserver and files are the
// commands' business.
package tuner
