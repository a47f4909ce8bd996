// Package scoring is schedloop's placement logic as pure functions: node and
// GPU scoring terms (bin-packing, fragmentation, topology distance, load),
// the weights that combine them and gang feasibility.
//
// The live scheduler plugins and the tuner's simulator both call it, so what
// the tuner learns is what the scheduler does. It must not import Kubernetes
// clients, the database or HTTP: plain structs in, numbers out.
package scoring
