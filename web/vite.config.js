import { defineConfig } from 'vite'

// The build lands in dist/, which the collector embeds. File names carry no
// hash so rebuilding unchanged sources leaves dist/ byte-identical.
export default defineConfig({
  base: '/',
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    assetsDir: 'assets',
    sourcemap: false,
    rollupOptions: {
      output: {
        entryFileNames: 'assets/app.js',
        chunkFileNames: 'assets/[name].js',
        assetFileNames: 'assets/[name][extname]',
      },
    },
  },
})
