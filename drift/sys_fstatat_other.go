//go:build linux && !(amd64 || arm64)

package drift

func (d *dirHandle) lstatBuf(name string, _ *[]byte) (fileStat, error) { return d.lstat(name) }
