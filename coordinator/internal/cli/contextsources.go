package cli

import (
	"github.com/spf13/pflag"

	"github.com/supervisorhq/supervisor/coordinator/internal/overlay"
	"github.com/supervisorhq/supervisor/coordinator/internal/service"
	"github.com/supervisorhq/supervisor/shared/contextpack"
)

// addContextFlags adds the flags naming the context strategy directories.
func addContextFlags(fs *pflag.FlagSet) {
	fs.String("builtin-context", "", "directory of built-in context strategies (default: configs/context next to the binary or in the working directory)")
	fs.String("user-context", contextpack.DefaultUserDir(), "directory of the user's context strategies (they replace built-in ones of the same name)")
}

// loadStrategies loads the context strategies a workflow's tasks may name:
// the built-in ones (found as built-in roles and templates are:
// builtinConfigDir), then the user's (a strategy of the same name
// replaces the built-in one). Problems come back with file:line.
func (e *env) loadStrategies() (*contextpack.Catalogue, error) {
	files, err := e.readLayers("context")
	if err != nil {
		return nil, err
	}
	cat, err := contextpack.LoadLayers(service.StrategyLayers(files)...)
	if err != nil {
		return nil, &ExitError{Code: ExitInvalid, Err: err}
	}
	return cat, nil
}

// withProjectStrategies overlays a trusted project's strategies
// (.supervisor/context/*.yaml at the base commit) on cat.
func withProjectStrategies(cat *contextpack.Catalogue, project []overlay.File) (*contextpack.Catalogue, error) {
	if len(project) == 0 {
		return cat, nil
	}
	out, err := cat.Over(service.StrategyLayers(project)...)
	if err != nil {
		return nil, &ExitError{Code: ExitInvalid, Err: err}
	}
	return out, nil
}
