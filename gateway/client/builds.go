package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/proliferate/proliferate/gateway/protocol"
)

// RunConfigurationBuild asks the gateway to run configuration build id
// (a service credential).
func (c *Client) RunConfigurationBuild(ctx context.Context, id string) (bool, error) {
	var out protocol.BuildDispatch
	_, err := c.do(ctx, http.MethodPost, "/configuration-builds/"+url.PathEscape(id)+"/run", struct{}{}, nil, &out)
	return out.Claimed, err
}
