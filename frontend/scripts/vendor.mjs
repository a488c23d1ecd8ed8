// Copies the browser builds of our pinned third-party packages from node_modules/ into vendor/,
// so the page never loads code from a CDN and no bundler is needed.
//
//   cd frontend && npm ci && npm run vendor
//
// vendor/ is rebuilt from scratch each time (stale files must not linger) and committed.
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

import { init, parse } from "es-module-lexer";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const modules = join(root, "node_modules");
const out = join(root, "vendor");

// Highlighting every language highlight.js knows would weigh ~1 MB; these cover most chats.
const LANGUAGES = [
  "bash", "c", "cpp", "css", "diff", "go", "java", "javascript", "json", "markdown",
  "plaintext", "python", "rust", "shell", "sql", "typescript", "xml", "yaml",
];

const manifest = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
const pinned = manifest.dependencies;

function installedVersion(name) {
  const file = join(modules, name, "package.json");
  if (!existsSync(file)) throw new Error(`${name} is not installed: run \`npm ci\` first`);
  return JSON.parse(readFileSync(file, "utf8")).version;
}

// A vendored file that does not match package.json would make the pin a lie.
for (const [name, version] of Object.entries({ ...pinned, ...manifest.devDependencies })) {
  if (!/^\d+\.\d+\.\d+$/.test(version)) throw new Error(`${name} must be pinned exactly, not ${version}`);
}
for (const [name, version] of Object.entries(pinned)) {
  const found = installedVersion(name);
  if (found !== version) throw new Error(`${name}: package.json pins ${version}, node_modules has ${found}`);
}

// Source maps are not copied, so their pointers would only produce 404s in the console.
const withoutSourceMap = (text) => text.replace(/\n?\/\/# sourceMappingURL=\S+\s*$/, "\n");

const written = [];
function write(target, text) {
  const path = join(out, target);
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, text);
  written.push(target);
}
const read = (pkg, file) => readFileSync(join(modules, pkg, file), "utf8");
const copy = (pkg, file, target) => write(target, withoutSourceMap(read(pkg, file)));

rmSync(out, { recursive: true, force: true });

copy("marked", "lib/marked.esm.js", "marked.js");
copy("eventsource-parser", "dist/index.js", "eventsource-parser.js");

// DOMPurify ships no minified ES module, only a minified UMD (30 kB against 87 kB for the
// readable ESM). A CommonJS-shaped shim lets the UMD export into a local object instead of
// onto window, and the module re-exports it: the library code itself is untouched.
write("purify.js", [
  "const module = { exports: {} };",
  "const exports = module.exports;",
  withoutSourceMap(read("dompurify", "dist/purify.min.js")).trimEnd(),
  "export default module.exports;",
  "",
].join("\n"));

const hljs = "@highlightjs/cdn-assets";
copy(hljs, "es/core.min.js", "highlight/core.js");
for (const language of LANGUAGES) {
  copy(hljs, `es/languages/${language}.min.js`, `highlight/languages/${language}.js`);
}
copy(hljs, "styles/github.min.css", "highlight/github.css");
copy(hljs, "styles/github-dark.min.css", "highlight/github-dark.css");

const licenses = [
  ["marked", "LICENSE", "marked.txt"],
  ["eventsource-parser", "LICENSE", "eventsource-parser.txt"],
  ["dompurify", "LICENSE", "dompurify.txt"],
  ["dompurify", "LICENSE-MPL", "dompurify-mpl.txt"],
  [hljs, "LICENSE", "highlight.js.txt"],
];
for (const [pkg, file, target] of licenses) write(`licenses/${target}`, read(pkg, file));

// The browser resolves only relative or absolute URLs (we have no import map): a bare
// specifier in a vendored file would fail at runtime, so refuse it here.
await init();
for (const target of written.filter((file) => file.endsWith(".js"))) {
  const [imports] = parse(readFileSync(join(out, target), "utf8"), target);
  for (const { type, specifier } of imports) {
    if (type === "import-meta") continue;
    if (typeof specifier !== "string" || !/^(\.{1,2}\/|\/)/.test(specifier)) {
      throw new Error(`${target} imports ${JSON.stringify(specifier)}, which a browser cannot resolve`);
    }
  }
}

const lines = Object.entries(pinned).map(([name, version]) => `- ${name} ${version}`);
write("README.md", [
  "# Vendored browser builds (generated)",
  "",
  "Written by `npm run vendor` (frontend/scripts/vendor.mjs) from the exact versions pinned in",
  "frontend/package.json. Do not edit by hand: change the pin, `npm install`, `npm run vendor`.",
  "",
  ...lines,
  "",
].join("\n"));

console.log(`vendor/: ${written.length} files from ${lines.length} packages into ${relative(process.cwd(), out) || "."}`);
