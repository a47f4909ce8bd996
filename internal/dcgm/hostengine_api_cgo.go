//go:build cgo

package dcgm

import godcgm "github.com/NVIDIA/go-dcgm/pkg/dcgm"

// dcgmAPI is the part of go-dcgm the host engine calls: one method for
// each package function, with go-dcgm's own signature, so that a test
// stands a fake DCGM in at go-dcgm's interface and the host engine's own
// code (the MIG hierarchy, the instances' UUIDs, labels, samples and
// inventory) runs unchanged. libDCGM forwards to the library.
type dcgmAPI interface {
	GetSupportedDevices() ([]uint, error)
	GetDeviceInfo(gpuID uint) (godcgm.Device, error)
	GetGPUInstanceHierarchy() (godcgm.MigHierarchy_v2, error)
	EntitiesGetLatestValues(entities []godcgm.GroupEntityPair, fields []godcgm.Short, flags uint) ([]godcgm.FieldValue_v2, error)
	EntityGetLatestValues(entityGroup godcgm.Field_Entity_Group, entityID uint, fields []godcgm.Short) ([]godcgm.FieldValue_v1, error)
	FieldGroupCreate(name string, fields []godcgm.Short) (godcgm.FieldHandle, error)
	FieldGroupDestroy(fieldsGroup godcgm.FieldHandle) error
	WatchFieldsWithGroupEx(fieldsGroup godcgm.FieldHandle, group godcgm.GroupHandle, updateFreq int64, maxKeepAge float64, maxKeepSamples int32) error
	GroupAllGPUs() godcgm.GroupHandle
	CreateGroup(name string) (godcgm.GroupHandle, error)
	AddEntityToGroup(group godcgm.GroupHandle, entityGroup godcgm.Field_Entity_Group, entityID uint) error
	DestroyGroup(group godcgm.GroupHandle) error
}

type libDCGM struct{}

func (libDCGM) GetSupportedDevices() ([]uint, error)         { return godcgm.GetSupportedDevices() }
func (libDCGM) GetDeviceInfo(id uint) (godcgm.Device, error) { return godcgm.GetDeviceInfo(id) }
func (libDCGM) GetGPUInstanceHierarchy() (godcgm.MigHierarchy_v2, error) {
	return godcgm.GetGPUInstanceHierarchy()
}

func (libDCGM) EntitiesGetLatestValues(e []godcgm.GroupEntityPair, f []godcgm.Short, flags uint) ([]godcgm.FieldValue_v2, error) {
	return godcgm.EntitiesGetLatestValues(e, f, flags)
}

func (libDCGM) EntityGetLatestValues(g godcgm.Field_Entity_Group, id uint, f []godcgm.Short) ([]godcgm.FieldValue_v1, error) {
	return godcgm.EntityGetLatestValues(g, id, f)
}

func (libDCGM) FieldGroupCreate(name string, f []godcgm.Short) (godcgm.FieldHandle, error) {
	return godcgm.FieldGroupCreate(name, f)
}

func (libDCGM) FieldGroupDestroy(f godcgm.FieldHandle) error { return godcgm.FieldGroupDestroy(f) }

func (libDCGM) WatchFieldsWithGroupEx(f godcgm.FieldHandle, g godcgm.GroupHandle, freq int64, age float64, samples int32) error {
	return godcgm.WatchFieldsWithGroupEx(f, g, freq, age, samples)
}

func (libDCGM) GroupAllGPUs() godcgm.GroupHandle                    { return godcgm.GroupAllGPUs() }
func (libDCGM) CreateGroup(name string) (godcgm.GroupHandle, error) { return godcgm.CreateGroup(name) }
func (libDCGM) AddEntityToGroup(g godcgm.GroupHandle, eg godcgm.Field_Entity_Group, id uint) error {
	return godcgm.AddEntityToGroup(g, eg, id)
}
func (libDCGM) DestroyGroup(g godcgm.GroupHandle) error { return godcgm.DestroyGroup(g) }

// libDCGM is go-dcgm itself: a change of a signature there fails here.
var _ dcgmAPI = libDCGM{}
