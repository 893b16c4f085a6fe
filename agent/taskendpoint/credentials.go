package taskendpoint

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/taskcreds"
)

// The error codes of the credentials endpoints, as the ECS agent names them.
const (
	codeNoID          = "NoIdInRequest"
	codeInvalidID     = "InvalidIdInRequest"
	codeInternalError = "InternalServerError"
)

// credentialsBody is a 200 answer of the credentials endpoints. Expiration is RFC 3339 in UTC, to
// the second, and is left out when the credentials have none.
type credentialsBody struct {
	RoleArn         string `json:"RoleArn"`
	AccessKeyID     string `json:"AccessKeyId"`
	SecretAccessKey string `json:"SecretAccessKey"`
	Token           string `json:"Token"`
	Expiration      string `json:"Expiration,omitempty"`
}

// credentialsError is an error answer of the credentials endpoints.
type credentialsError struct {
	Code          string `json:"code"`
	Message       string `json:"message"`
	HTTPErrorCode int    `json:"HTTPErrorCode"`
}

// serveCredentials answers /v1/credentials?id= (version 1) and /v2/credentials/ID (version 2).
func (h *Handler) serveCredentials(w http.ResponseWriter, r *http.Request, version int, id string) {
	prefix := fmt.Sprintf("CredentialsV%dRequest: ", version)
	fail := func(status int, code, msg string) {
		writeJSON(w, status, credentialsError{Code: code, Message: prefix + msg, HTTPErrorCode: status})
	}
	if id == "" {
		h.log.Debug("task credentials request without an ID", "api_version", version)
		fail(http.StatusBadRequest, codeNoID, "No Credential ID in the request")
		return
	}
	c, err := h.lookupCredentials(r.Context(), id)
	if errdefs.IsNotFound(err) && h.logCreds != nil && h.fromHost(r) {
		c, err = h.logCreds.TaskCredentials(r.Context(), id)
	}
	switch {
	case errdefs.IsNotFound(err):
		h.log.Debug("task credentials not found", "credentials_id", taskcreds.ShortID(id), "api_version", version)
		fail(http.StatusBadRequest, codeInvalidID, "Credentials not found")
		return
	case err != nil:
		h.log.Debug("task credentials unavailable", "credentials_id", taskcreds.ShortID(id), "api_version", version, "error", err)
		fail(http.StatusInternalServerError, codeInternalError, "Credentials unavailable: "+err.Error())
		return
	}
	body := credentialsBody{RoleArn: c.RoleArn, AccessKeyID: c.AccessKeyID, SecretAccessKey: c.SecretAccessKey, Token: c.SessionToken}
	if !c.Expiration.IsZero() {
		body.Expiration = c.Expiration.UTC().Truncate(time.Second).Format(time.RFC3339)
	}
	h.log.Debug("task credentials served", "credentials_id", taskcreds.ShortID(id), "role_arn", c.RoleArn, "api_version", version)
	writeJSON(w, http.StatusOK, body)
}

// fromHost reports whether r comes from one of the host's own addresses, as the Docker daemon's
// requests do.
func (h *Handler) fromHost(r *http.Request) bool {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	return err == nil && h.isHost(ap.Addr().Unmap())
}

// hostAddress reports whether ip is loopback or assigned to one of the host's interfaces.
func hostAddress(ip netip.Addr) bool {
	if ip.IsLoopback() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if addr, ok := netip.AddrFromSlice(n.IP); ok && addr.Unmap() == ip {
				return true
			}
		}
	}
	return false
}

// lookupCredentials asks the source, treating a missing source as one that knows no credentials.
func (h *Handler) lookupCredentials(ctx context.Context, id string) (taskcreds.Credentials, error) {
	if h.creds == nil {
		return taskcreds.Credentials{}, fmt.Errorf("credentials %s: %w", taskcreds.ShortID(id), errdefs.ErrNotFound)
	}
	return h.creds.TaskCredentials(ctx, id)
}
