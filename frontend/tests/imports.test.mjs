// Without a bundler or an import map, the browser must be able to fetch every module by URL:
// walk the graph from index.html and check each specifier resolves to a file we serve.
import assert from "node:assert/strict";
import { existsSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { init, parse } from "es-module-lexer";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const html = readFileSync(join(root, "index.html"), "utf8");

// Mirrors the Django fallback route (chatapp/urls.py): files at the top level or under vendor/.
const SERVED = /^(?:vendor\/(?:[\w-][\w.-]*\/)*)?[\w-][\w.-]*\.(?:js|mjs|css|svg|png|ico|map|woff2)$/;

const htmlReferences = () => [...html.matchAll(/\s(?:src|href)="([^"#]+)"/g)].map((m) => m[1]);

test("index.html refers to its files by absolute paths that exist and are served", () => {
  const local = htmlReferences().filter((url) => !/^[a-z]+:/i.test(url));
  assert.ok(local.includes("/app.js"));
  for (const url of local) {
    assert.ok(url.startsWith("/"), `${url} must be absolute: nginx serves index.html for any path`);
    const path = url.slice(1);
    assert.match(path, SERVED, `${url} would not be served without nginx`);
    assert.ok(existsSync(join(root, path)) && statSync(join(root, path)).isFile(), `${url} is missing`);
  }
});

test("nothing is loaded from another origin", () => {
  for (const url of htmlReferences()) assert.doesNotMatch(url, /^(?:https?:)?\/\//, url);
});

test("every module reachable from app.js resolves without a bundler", async () => {
  await init();
  const seen = new Set();
  const queue = [join(root, "app.js")];
  while (queue.length) {
    const file = queue.pop();
    if (seen.has(file)) continue;
    seen.add(file);
    const path = relative(root, file).split(sep).join("/");
    assert.match(path, SERVED, `${path} would not be served`);
    const [imports] = parse(readFileSync(file, "utf8"), path);
    for (const { type, specifier } of imports) {
      if (type === "import-meta") continue;
      assert.equal(typeof specifier, "string", `${path} has a computed dynamic import`);
      assert.match(specifier, /^(?:\.{1,2}\/|\/)/, `${path} imports the bare specifier "${specifier}"`);
      const target = specifier.startsWith("/") ? join(root, specifier) : resolve(dirname(file), specifier);
      assert.ok(existsSync(target), `${path} imports ${specifier}, which does not exist`);
      assert.ok(!relative(root, target).startsWith(".."), `${specifier} leaves frontend/`);
      queue.push(target);
    }
  }
  const modules = [...seen].map((file) => relative(root, file).split(sep).join("/"));
  for (const expected of ["stream.js", "render.js", "vendor/marked.js", "vendor/purify.js", "vendor/eventsource-parser.js", "vendor/highlight/core.js"]) {
    assert.ok(modules.includes(expected), `${expected} is not in the graph`);
  }
  assert.ok(modules.every((m) => !m.startsWith("node_modules/")), "node_modules/ is not served");
});
