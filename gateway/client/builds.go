package client

import (
	"context"
	"net/http"
	"net/url"
)

// BuildDispatch is the answer of POST /configuration-builds/{id}/run.
type BuildDispatch struct {
	// Claimed is false when the build was already claimed (by an earlier
	// request or a gateway's periodic pass) or has ended.
	Claimed bool `json:"claimed"`
}

// RunConfigurationBuild asks the gateway to run configuration build id
// (a service credential).
func (c *Client) RunConfigurationBuild(ctx context.Context, id string) (bool, error) {
	var out BuildDispatch
	_, err := c.do(ctx, http.MethodPost, "/configuration-builds/"+url.PathEscape(id)+"/run", struct{}{}, nil, &out)
	return out.Claimed, err
}
