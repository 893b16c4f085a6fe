package localcp

import (
	"encoding/json"
)

// acsFrame reads and writes the envelope that acs.Encode and acs.Decode keep to themselves, so that
// tests can send and inspect frames of any type, even malformed ones.
type acsFrame struct {
	Type    string          `json:"type"`
	Message json.RawMessage `json:"message"`
}
