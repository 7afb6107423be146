// slugify: titles to URL slugs. A pure tool: no grants needed.

// The engine has no Unicode normalisation tables (String.prototype.normalize): fold the
// common Latin accents by hand.
const FOLD = {
  à: "a", á: "a", â: "a", ä: "a", ã: "a", å: "a", ç: "c", è: "e", é: "e", ê: "e", ë: "e",
  ì: "i", í: "i", î: "i", ï: "i", ñ: "n", ò: "o", ó: "o", ô: "o", ö: "o", õ: "o", ø: "o",
  ù: "u", ú: "u", û: "u", ü: "u", ý: "y", ÿ: "y", ß: "ss", æ: "ae", œ: "oe",
};

/**
 * Lowercases a title, drops accents and punctuation, and joins the words with dashes.
 */
export function slugify(title, maxLen) {
  const slug = Array.from(title.toLowerCase(), (c) => FOLD[c] ?? c)
    .join("")
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-+|-+$/g, "");
  return slug.slice(0, maxLen ?? 60).replace(/-+$/, "");
}
