package idempotency

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"

	"github.com/gowebpki/jcs"
)

// Fingerprint identifies the content of a request: a SHA-256 over the
// operation, the path parameters and the RFC 8785 canonical form of the JSON
// body. Key order and insignificant whitespace do not change it; any change of
// meaning does. The same key with another fingerprint is refused.
type Fingerprint [sha256.Size]byte

// String returns the fingerprint in hex, for logs.
func (f Fingerprint) String() string { return hex.EncodeToString(f[:]) }

// NewFingerprint computes the fingerprint of a request. body must be a JSON
// document; an error means it could not be canonicalized (the caller reports
// invalid_json). Every part is length-prefixed, so no two different requests
// can run together into the same bytes.
func NewFingerprint(op Operation, pathParams []string, body []byte) (Fingerprint, error) {
	canonical, err := jcs.Transform(body)
	if err != nil {
		return Fingerprint{}, err
	}
	h := sha256.New()
	var buf []byte
	write := func(b []byte) {
		buf = binary.AppendUvarint(buf[:0], uint64(len(b)))
		h.Write(buf)
		h.Write(b)
	}
	write([]byte(op))
	buf = binary.AppendUvarint(buf[:0], uint64(len(pathParams)))
	h.Write(buf)
	for _, p := range pathParams {
		write([]byte(p))
	}
	write(canonical)
	var f Fingerprint
	h.Sum(f[:0])
	return f, nil
}
