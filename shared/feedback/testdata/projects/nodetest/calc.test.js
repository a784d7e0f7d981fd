const test = require('node:test');
const assert = require('node:assert');
const { add, parsePort } = require('./calc');

test('add adds', () => {
  assert.strictEqual(add(2, 2), 4);
});

test('parsePort', async (t) => {
  await t.test('accepts digits', () => {
    assert.strictEqual(parsePort('80'), 80);
  });
  await t.test('rejects letters', () => {
    assert.strictEqual(parsePort('80x'), 80);
  });
});

test('passes', () => {});
