package cli

import (
	"os"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/supervisorhq/supervisor/shared/contextpack"
)

// addContextFlags adds the flags naming the context strategy directories.
func addContextFlags(fs *pflag.FlagSet) {
	fs.String("builtin-context", "", "directory of built-in context strategies (default: configs/context next to the binary or in the working directory)")
	fs.String("user-context", contextpack.DefaultUserDir(), "directory of the user's context strategies (they replace built-in ones of the same name)")
}

// builtinContextDir finds the built-in context strategies the way the
// built-in gates are found: the flag, else ../configs/context beside the
// executable, else ./configs/context, else /etc/supervisor/context; ""
// when none exists.
func builtinContextDir(flag string) string {
	if flag != "" {
		return flag
	}
	var candidates []string
	if exe, err := os.Executable(); err == nil {
		candidates = append(candidates, filepath.Join(filepath.Dir(exe), "..", "configs", "context"))
	}
	candidates = append(candidates, filepath.Join("configs", "context"), "/etc/supervisor/context")
	for _, c := range candidates {
		if fi, err := os.Stat(c); err == nil && fi.IsDir() {
			abs, _ := filepath.Abs(c)
			return abs
		}
	}
	return ""
}

// loadStrategies loads the context strategies a workflow's tasks may name:
// the built-in ones, then the user's (a strategy of the same name
// replaces the built-in one). Problems come back with file:line.
func (e *env) loadStrategies() (*contextpack.Catalogue, error) {
	cat, err := contextpack.Load(builtinContextDir(e.v.GetString("builtin-context")), e.v.GetString("user-context"))
	if err != nil {
		return nil, &ExitError{Code: ExitInvalid, Err: err}
	}
	return cat, nil
}
