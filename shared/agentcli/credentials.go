package agentcli

import (
	"slices"
	"strings"
)

// credentials are the environment variables each CLI reads its provider
// credentials from. A worker passes an adapter's variables to its agent
// when its configuration allows them; a workflow may never set them.
var credentials = map[string][]string{
	"claude-code": {"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"},
	"codex":       {"OPENAI_API_KEY", "CODEX_API_KEY"},
	"gemini":      {"GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_APPLICATION_CREDENTIALS"},
}

// Credentials returns the variables adapter's CLI reads its credentials
// from (nil for the command adapter and unknown names).
func Credentials(adapter string) []string {
	return slices.Clone(credentials[adapter])
}

// IsCredential reports whether name is a provider credential: one of any
// adapter's Credentials, or any name ending in _API_KEY.
func IsCredential(name string) bool {
	name = strings.ToUpper(name)
	if strings.HasSuffix(name, "_API_KEY") {
		return true
	}
	for _, vars := range credentials {
		if slices.Contains(vars, name) {
			return true
		}
	}
	return false
}
