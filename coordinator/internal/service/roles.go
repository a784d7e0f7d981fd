package service

import (
	"path/filepath"
	"strings"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/coordinator/internal/overlay"
)

// ProjectFiles turns a submission's project config files into overlay
// files of the project layer, each named by its base name without the
// extension.
func ProjectFiles(files []api.GateFile) []overlay.File {
	out := make([]overlay.File, 0, len(files))
	for _, f := range files {
		base := filepath.Base(f.Filename)
		out = append(out, overlay.File{Layer: overlay.Project, Name: strings.TrimSuffix(base, filepath.Ext(base)),
			Path: f.Filename, Data: []byte(f.Content)})
	}
	return out
}
