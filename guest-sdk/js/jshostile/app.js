// Test fixture: JavaScript that loops forever or throws.

export function spin() {
  let n = 0;
  for (;;) {
    n += 1;
  }
}

export function throwError(message) {
  throw new TypeError(message);
}
