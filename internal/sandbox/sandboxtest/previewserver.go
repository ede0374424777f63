package sandboxtest

import "fmt"

// PreviewServerPy is a tiny HTTP and WebSocket server in Python (the
// standard library only) for preview tests, run inside a sandbox as
// `python3 <file> <port>`: every GET or HEAD answers 200 with
// "preview-ok" and what it received (path, X-Forwarded-Prefix, Cookie,
// Authorization); POST, PUT, PATCH and DELETE answer "<method>:<body>";
// a WebSocket upgrade on any path echoes each text message as
// "echo:<message>".
const PreviewServerPy = `import base64, hashlib, http.server, socketserver, struct, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    def log_message(self, *a):
        pass
    def reply(self, code, body, head=False):
        b = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        if not head:
            self.wfile.write(b)
    def info(self):
        return "preview-ok path=%s prefix=%s cookie=%s auth=%s" % (self.path, self.headers.get("X-Forwarded-Prefix", ""),
            self.headers.get("Cookie", ""), self.headers.get("Authorization", ""))
    def do_GET(self):
        if self.headers.get("Upgrade", "").lower() == "websocket":
            return self.ws()
        self.reply(200, self.info())
    def do_HEAD(self):
        self.reply(200, self.info(), head=True)
    def write(self):
        n = int(self.headers.get("Content-Length") or 0)
        self.reply(200, self.command + ":" + self.rfile.read(n).decode())
    do_POST = do_PUT = do_PATCH = do_DELETE = write
    def ws(self):
        self.close_connection = True
        key = self.headers["Sec-WebSocket-Key"]
        acc = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", acc)
        self.end_headers()
        self.wfile.flush()
        while True:
            h = self.rfile.read(2)
            if len(h) < 2:
                return
            op, n = h[0] & 0x0f, h[1] & 0x7f
            if n == 126:
                n = struct.unpack(">H", self.rfile.read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self.rfile.read(8))[0]
            mask = self.rfile.read(4) if h[1] & 0x80 else b"\0\0\0\0"
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(n)))
            if op == 8:
                self.wfile.write(b"\x88\x00")
                return
            if op == 1:
                out = ("echo:" + data.decode()).encode()
                hdr = bytes([0x81, len(out)]) if len(out) < 126 else bytes([0x81, 126]) + struct.pack(">H", len(out))
                self.wfile.write(hdr + out)
                self.wfile.flush()
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
S(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

// PreviewServerCommand is a service command that runs PreviewServerPy on
// port, written to file (relative to the service's working directory) by
// the caller.
func PreviewServerCommand(file string, port int) string {
	return fmt.Sprintf("exec python3 %s %d", file, port)
}
