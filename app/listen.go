package app

import "net"

// Prebind makes the role that listens on the address setting named (today
// GATEWAY_ADDR) serve on ln instead of binding that address itself. A
// caller that must know the address before the platform starts (a test
// writing the gateway's port into GATEWAY_PUBLIC_URL) binds port 0 first
// and hands the listener over: nobody can take the port in between, as
// they could if the caller probed a free port, closed it and let the role
// bind it again. Call it before the role starts; the role closes ln when
// it stops.
func (a *App) Prebind(setting string, ln net.Listener) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.prebound == nil {
		a.prebound = map[string]net.Listener{}
	}
	a.prebound[setting] = ln
}

// listen is the listener of the address setting: the one Prebind handed
// over (once), else a new one on addr.
func (a *App) listen(setting, addr string) (net.Listener, error) {
	a.mu.Lock()
	ln, ok := a.prebound[setting]
	delete(a.prebound, setting)
	a.mu.Unlock()
	if ok {
		return ln, nil
	}
	return net.Listen("tcp", addr)
}
