package join

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"flotilla.dev/flotilla/api/agentapi"
)

// FuzzJoinRequest feeds arbitrary bodies to the parsing the public,
// unauthenticated join endpoint does before it looks anything up: every
// refusal must be a client error (4xx), never a panic or a 500.
func FuzzJoinRequest(f *testing.F) {
	f.Add(`{"token":"abcdef.0123456789abcdef","nodeName":"kiosk-1","csr":"-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"}`)
	f.Add(`{"token":1}`)
	f.Add(`{"extra":true}`)
	f.Add(``)
	f.Fuzz(func(t *testing.T, body string) {
		r := httptest.NewRequest(http.MethodPost, agentapi.PathCSR, strings.NewReader(body))
		var req agentapi.JoinRequest
		err := decode(r, &req)
		if err == nil {
			if _, err = ParseToken(req.Token); err == nil {
				_, err = csrKey(req.CSR)
			} else {
				err = apierrors.NewBadRequest(err.Error())
			}
		}
		if err == nil {
			return
		}
		var se *apierrors.StatusError
		if !errors.As(err, &se) {
			t.Fatalf("error %v is not a Status", err)
		}
		if c := se.Status().Code; c < 400 || c >= 500 {
			t.Fatalf("refusal with code %d: %v", c, err)
		}
	})
}
