import { writeFileSync } from 'node:fs'
import { defineConfig, type Plugin } from 'vite'
import preact from '@preact/preset-vite'

// dist/.gitkeep is committed so `go build` embeds an (empty) dist without
// Node; the build empties dist, so it is written back.
const keepDist = (): Plugin => ({
  name: 'keep-dist',
  closeBundle() {
    writeFileSync('dist/.gitkeep', '')
  },
})

// The dashboard is served by the API role at / (go:embed of dist/); the
// REST API is /api/v1 and the gateway /proliferate/… on the same origin.
// `npm run dev` proxies both to a running `make run`.
export default defineConfig({
  plugins: [preact(), keepDist()],
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    sourcemap: false,
    assetsInlineLimit: 0,
    chunkSizeWarningLimit: 400,
  },
  server: {
    proxy: {
      '/api': 'http://127.0.0.1:8080',
      '/proliferate': { target: 'http://127.0.0.1:8080', ws: true },
    },
  },
})
