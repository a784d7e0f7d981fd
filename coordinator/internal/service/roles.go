package service

import (
	"path/filepath"
	"strings"

	"github.com/supervisorhq/supervisor/coordinator/internal/api"
	"github.com/supervisorhq/supervisor/coordinator/internal/overlay"
	"github.com/supervisorhq/supervisor/shared/contextpack"
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

// StrategyLayers groups context strategy files by layer, the lowest
// first, as contextpack.LoadLayers and Catalogue.Over take them.
func StrategyLayers(files []overlay.File) [][]contextpack.Source {
	layers := make([][]contextpack.Source, overlay.Project+1)
	for _, f := range files {
		layers[f.Layer] = append(layers[f.Layer], contextpack.Source{Path: f.Path, Data: f.Data})
	}
	return layers
}
