// Words, numbers, dates and durations in one language of the catalogue (src/adapters/http/page/i18n.js),
// whatever the browser's locale. No DOM here: the node test (test/http/i18n.unit.test.ts) uses it too.

const PLACEHOLDER = /\{(\w+)\}/g;

/** The language to show: a stored choice of ours, else the first of the browser's we have, else English. */
export const pickLanguage = (stored, preferred, languages) => {
  if (stored && stored in languages) return stored;
  for (const tag of preferred ?? []) {
    const primary = String(tag).toLowerCase().split('-')[0];
    if (primary in languages) return primary;
  }
  return 'en';
};

export const translator = (catalogue, lang) => {
  const strings = catalogue[lang] ?? catalogue.en;
  const plurals = new Intl.PluralRules(lang);
  const number = new Intl.NumberFormat(lang);
  // A duration's parts in the language's own unit words and plurals ("2 dias", "3 uur", "1 min"), by Intl (CLDR), not by the catalogue.
  const unit = (name, fractionDigits = 0) =>
    new Intl.NumberFormat(lang, { style: 'unit', unit: name, unitDisplay: 'short', minimumFractionDigits: fractionDigits, maximumFractionDigits: fractionDigits });
  const units = { tenths: unit('second', 1), s: unit('second'), min: unit('minute'), h: unit('hour'), d: unit('day') };
  const dateTime = new Intl.DateTimeFormat(lang, { dateStyle: 'medium', timeStyle: 'medium' });
  const timeOfDay = new Intl.DateTimeFormat(lang, { timeStyle: 'medium' });

  const formatValue = (value) => (typeof value === 'number' ? number.format(value) : String(value));

  /** The template of `key` (a plural one chosen by params.count); a key missing here falls back to English. */
  const template = (key, params) => {
    const value = strings[key] ?? catalogue.en[key];
    if (value === undefined) return key;
    if (typeof value === 'string') return value;
    return value[plurals.select(params.count)] ?? value.other;
  };

  /** The text of `key` with its placeholders filled. */
  const t = (key, params = {}) => template(key, params).replace(PLACEHOLDER, (whole, name) => (name in params ? formatValue(params[name]) : whole));

  /** As t, but a parameter may be a DOM node: the parts in order, strings and nodes, for a caller to append. */
  const parts = (key, params = {}) =>
    template(key, params)
      .split(/(\{\w+\})/)
      .filter((part) => part !== '')
      .map((part) => {
        const name = /^\{(\w+)\}$/.exec(part)?.[1];
        if (name === undefined || !(name in params)) return part;
        const value = params[name];
        return typeof value === 'object' && value !== null ? value : formatValue(value);
      });

  /** A duration in its two largest units, each as Intl says it: "4.3 sec", "1 min 30 sec", "3 uur 5 min", "2 dias 1 h". */
  const duration = (ms) => {
    if (ms === null || ms === undefined) return '–';
    const s = Math.max(0, ms) / 1000;
    if (s < 10) return units.tenths.format(s);
    if (s < 60) return units.s.format(Math.floor(s));
    const m = Math.floor(s / 60);
    if (m < 60) return `${units.min.format(m)} ${units.s.format(Math.floor(s % 60))}`;
    const h = Math.floor(m / 60);
    if (h < 24) return `${units.h.format(h)} ${units.min.format(m % 60)}`;
    return `${units.d.format(Math.floor(h / 24))} ${units.h.format(h % 24)}`;
  };

  return {
    lang,
    t,
    parts,
    number: (n) => number.format(n),
    duration,
    /** A date and time, e.g. "1 dec 2026, 21:33:30" in Dutch. */
    clock: (epochMs) => (epochMs === null || epochMs === undefined ? '–' : dateTime.format(epochMs)),
    timeOfDay: (epochMs) => timeOfDay.format(epochMs),
    /** "3 s ago" / "in 3 s", for an instant `deltaMs` from now (negative: past). */
    relative: (deltaMs) => (deltaMs >= 0 ? t('time.in', { duration: duration(deltaMs) }) : t('time.ago', { duration: duration(-deltaMs) })),
  };
};
