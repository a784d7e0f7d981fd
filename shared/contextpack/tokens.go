package contextpack

import (
	"sync"

	"github.com/tiktoken-go/tokenizer"
	"github.com/tiktoken-go/tokenizer/codec"
)

// Encoding is the tokenizer encoding tokens are counted with (CTX-11):
// OpenAI's o200k_base, from github.com/tiktoken-go/tokenizer, which embeds
// its vocabulary (no network). Claude's and Gemini's tokenizers are not
// public; docs/context-packing.md says how far o200k_base is from them.
const Encoding = "o200k_base"

// Tokenizer counts tokens. The zero value is not usable: use
// NewTokenizer.
type Tokenizer struct {
	codec tokenizer.Codec
}

var (
	sharedOnce  sync.Once
	sharedCodec tokenizer.Codec
)

// NewTokenizer returns the o200k_base tokenizer. Its vocabulary is built
// once per process and shared (the codec is safe for concurrent use).
func NewTokenizer() *Tokenizer {
	sharedOnce.Do(func() {
		// The codec itself, not tokenizer.Get: Get links every encoding's
		// vocabulary into the binary.
		c := codec.NewO200kBase()
		c.SetErrorMode(codec.ErrorModeReplace)
		sharedCodec = c
	})
	return &Tokenizer{codec: sharedCodec}
}

// Count returns the tokens of s and whether they were counted by the
// tokenizer; when it fails (or is missing), the count is Estimate's.
func (t *Tokenizer) Count(s string) (int, bool) {
	if t == nil || t.codec == nil {
		return Estimate(s), false
	}
	n, err := t.codec.Count(s)
	if err != nil {
		return Estimate(s), false
	}
	return n, true
}

// Estimate is the fallback count: one token per 3 bytes, rounded up. It
// errs high, so a context that fits by the estimate fits by the
// tokenizer too: on this repository's own files o200k_base counts 3.4
// bytes per token of Go and 3.9 of Markdown, so the estimate is about 14%
// (Go) to 29% (Markdown) above it (docs/context-packing.md).
func Estimate(s string) int { return (len(s) + 2) / 3 }
