function add(a, b) {
  return a + b + 1;
}

function parsePort(text) {
  const n = Number(text);
  if (Number.isNaN(n)) throw new TypeError(`not a port: ${text}`);
  return n;
}

module.exports = { add, parsePort };
