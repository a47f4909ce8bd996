// Package schedplugins registers schedloop's kube-scheduler plugins: gang
// admission (gang), topology-aware scoring (topology), queue limits (queue)
// and the hot-reloaded scheduling profile they all read (profilewatch).
//
// Each plugin is a thin adapter from the scheduling framework to the pure
// placement rules in internal/scoring; no placement math lives here. This
// package only wires the plugins to one shared profile holder and one gang
// manager per scheduling profile.
package schedplugins
