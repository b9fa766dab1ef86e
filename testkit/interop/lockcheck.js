// lockcheck PINNED INSTALLED: compares two package-lock.json files and exits
// 1, listing the differences, if a package this machine installs (every
// package but an optional one for another os or cpu) is missing, added or at
// another version in INSTALLED. Used by run.sh after `npm install`.
"use strict";
const fs = require("fs");

function installed(file) {
  const packages = JSON.parse(fs.readFileSync(file, "utf8")).packages || {};
  const out = new Map();
  for (const [path, p] of Object.entries(packages)) {
    if (path === "") continue; // the project itself
    const elsewhere =
      p.optional &&
      ((p.os && !p.os.includes(process.platform)) || (p.cpu && !p.cpu.includes(process.arch)));
    if (!elsewhere) out.set(path, p.version);
  }
  return out;
}

const [pinned, got] = process.argv.slice(2).map(installed);
const diffs = [];
for (const [path, v] of pinned) {
  if (!got.has(path)) diffs.push(`removed ${path}@${v}`);
  else if (got.get(path) !== v) diffs.push(`changed ${path}: ${v} -> ${got.get(path)}`);
}
for (const [path, v] of got) if (!pinned.has(path)) diffs.push(`added ${path}@${v}`);
for (const d of diffs) console.error(`interop: lock ${d}`);
process.exit(diffs.length ? 1 : 0);
