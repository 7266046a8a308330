import { describe, expect, it } from 'vitest';

// The dashboard's string catalogue (src/adapters/http/page/i18n.js) and its formatting
// (format.js), loaded as the browser loads them: plain modules, no DOM needed. English is the
// reference: every language has its keys, no more, each of its placeholders, and the plural forms
// its language's rules ask for.

type Value = string | Record<string, string>;
type Catalogue = Record<string, Record<string, Value>>;
const page = (file: string) => new URL(`../../src/adapters/http/page/${file}`, import.meta.url).href;
const { CATALOGUE, LANGUAGES } = (await import(page('i18n.js'))) as { CATALOGUE: Catalogue; LANGUAGES: Record<string, string> };
const { translator, pickLanguage } = await import(page('format.js'));

const placeholdersOf = (template: string) => [...template.matchAll(/\{(\w+)\}/g)].map((m) => m[1]!);

const english = CATALOGUE.en!;
const others = Object.keys(LANGUAGES).filter((lang) => lang !== 'en');

describe('the catalogue', () => {
  it('has English, Dutch, Portuguese and Swedish, and a catalogue for each language of the picker', () => {
    expect(Object.keys(LANGUAGES)).toEqual(expect.arrayContaining(['en', 'nl', 'pt', 'sv']));
    expect(Object.keys(CATALOGUE).sort()).toEqual(Object.keys(LANGUAGES).sort());
  });

  it.each(others)('%s has every key of English and no other', (lang) => {
    const keys = Object.keys(CATALOGUE[lang]!);
    expect(Object.keys(english).filter((k) => !keys.includes(k)), 'missing').toEqual([]);
    expect(keys.filter((k) => !(k in english)), 'extra').toEqual([]);
  });

  // A plural form is held to the English form of its category ("its slot" may leave out the count
  // "their 3 slots" gives), a form English lacks (Portuguese "many") to English "other".
  it.each(others)('%s: each translation names every placeholder of its English string, in each of its forms', (lang) => {
    const wrong = Object.entries(english).flatMap(([key, value]) => {
      const translated = CATALOGUE[lang]![key]!;
      const forms: [string, string][] = typeof translated === 'string' ? [['', translated]] : Object.entries(translated);
      return forms.flatMap(([category, form]) => {
        const reference = typeof value === 'string' ? value : (value[category] ?? value.other!);
        return placeholdersOf(reference).filter((name) => !form.includes(`{${name}}`)).map((name) => `${key}: {${name}} missing in "${form}"`);
      });
    });
    expect(wrong).toEqual([]);
  });

  it.each(Object.keys(LANGUAGES))('%s: a plural string has every form Intl.PluralRules needs for the language, a plain string stays plain', (lang) => {
    const needed = new Intl.PluralRules(lang).resolvedOptions().pluralCategories;
    const wrong = Object.entries(CATALOGUE[lang]!).flatMap(([key, value]) => {
      if (typeof english[key] === 'string') return typeof value === 'string' ? [] : [`${key}: plural forms where English has one string`];
      if (typeof value === 'string') return [`${key}: one string where English has plural forms`];
      return [
        ...needed.filter((form) => !(form in value)).map((form) => `${key}: no "${form}" form`),
        ...Object.keys(value).filter((form) => !needed.includes(form as Intl.LDMLPluralRule)).map((form) => `${key}: a "${form}" form the language does not use`),
      ];
    });
    expect(wrong).toEqual([]);
  });

  it('every string is text: no markup for the page to parse', () => {
    for (const [lang, strings] of Object.entries(CATALOGUE)) {
      for (const [key, value] of Object.entries(strings)) {
        for (const form of typeof value === 'string' ? [value] : Object.values(value)) expect(form, `${lang} ${key}`).not.toMatch(/<[a-z/]/i);
      }
    }
  });
});

describe('formatting in the chosen language, whatever the locale', () => {
  it('chooses the plural form by count and formats the number', () => {
    expect(translator(CATALOGUE, 'en').t('cards.ofKeys', { count: 1 })).toBe('of 1 key');
    expect(translator(CATALOGUE, 'en').t('cards.ofKeys', { count: 1234 })).toBe('of 1,234 keys');
    expect(translator(CATALOGUE, 'nl').t('cards.ofKeys', { count: 1234 })).toBe('van 1.234 sleutels');
    expect(translator(CATALOGUE, 'sv').t('cards.scheduled', { count: 1 })).toBe('1 schemalagt');
    expect(translator(CATALOGUE, 'sv').t('cards.scheduled', { count: 2 })).toBe('2 schemalagda');
    // Portuguese treats 0 as singular, and a million as its own form.
    expect(translator(CATALOGUE, 'pt').t('done.discarded', { count: 0, key: 'k' })).toBe('0 tarefa em espera de k descartada.');
    expect(translator(CATALOGUE, 'pt').t('done.discarded', { count: 1_000_000, key: 'k' })).toBe('1.000.000 tarefas em espera de k descartadas.');
  });

  it('regression: one live worker is singular in Portuguese and Swedish ("1 ativos", "1 aktiva" before), and so is one key of a page', () => {
    expect(translator(CATALOGUE, 'pt').t('workers.summaryLive', { count: 1 })).toBe('1 ativo');
    expect(translator(CATALOGUE, 'pt').t('workers.summaryLive', { count: 2 })).toBe('2 ativos');
    expect(translator(CATALOGUE, 'sv').t('workers.summaryLive', { count: 1 })).toBe('1 aktiv');
    expect(translator(CATALOGUE, 'sv').t('workers.summaryLive', { count: 2 })).toBe('2 aktiva');
    expect(translator(CATALOGUE, 'en').t('keys.range', { from: 1, to: 1, count: 1 })).toBe('1–1 of 1 key');
    expect(translator(CATALOGUE, 'nl').t('keys.range', { from: 51, to: 100, count: 10_000 })).toBe('51–100 van 10.000 sleutels');
  });

  it('fills a placeholder with a value as text, once: a value holding braces is not filled again', () => {
    expect(translator(CATALOGUE, 'en').t('release.title', { job: '{job}' })).toBe('Release job {job}?');
    expect(translator(CATALOGUE, 'sv').parts('guest.fromKey', { key: { node: true } })).toEqual(['från nyckeln ', { node: true }]);
  });

  it("durations and relative times in the language: Intl's units, decimal separator, ago and ahead", () => {
    const nl = translator(CATALOGUE, 'nl');
    expect(nl.duration(4_250)).toBe('4,3 sec');
    expect(nl.duration(3 * 3_600_000 + 5 * 60_000)).toBe('3 uur 5 min');
    expect(nl.relative(-90_000)).toBe('1 min 30 sec geleden');
    expect(translator(CATALOGUE, 'pt').relative(-2_000)).toBe('há 2,0 s');
    expect(translator(CATALOGUE, 'sv').relative(75_000)).toBe('om 1 min 15 s');
    expect(translator(CATALOGUE, 'en').duration(2 * 86_400_000 + 3_600_000)).toBe('2 days 1 hr');
  });

  // Regression (issue 25): a duration's units were the catalogue's own ("{n} d" in every language,
  // never a plural); Intl's carry each language's words and plural forms.
  it('a day and two days in each language, as Intl says them', () => {
    const days = (lang: string) => [86_400_000, 2 * 86_400_000].map((ms) => translator(CATALOGUE, lang).duration(ms));
    expect(days('en')).toEqual(['1 day 0 hr', '2 days 0 hr']);
    expect(days('nl')).toEqual(['1 dag 0 uur', '2 dagen 0 uur']);
    expect(days('pt')).toEqual(['1 dia 0 h', '2 dias 0 h']);
    expect(days('sv')).toEqual(['1 d 0 tim', '2 d 0 tim']);
  });

  it('pt and sv: singular and plural by Intl.PluralRules (pt: 0 and 1 singular, a million its own form; sv: 1 alone singular)', () => {
    const pt = translator(CATALOGUE, 'pt');
    const sv = translator(CATALOGUE, 'sv');
    expect([0, 1, 2, 1_000_000].map((count) => pt.t('cards.ofKeys', { count }))).toEqual(['de 0 chave', 'de 1 chave', 'de 2 chaves', 'de 1.000.000 chaves']);
    expect([0, 1, 2].map((count) => sv.t('workers.summaryLive', { count }))).toEqual(['0 aktiva', '1 aktiv', '2 aktiva']);
    expect([1, 2].map((count) => pt.t('workers.moreJobs', { count }))).toEqual(['+1 outra', '+2 outras']);
  });

  it.each([
    ['en', 'of 1,234,567 keys'],
    ['nl', 'van 1.234.567 sleutels'],
    ['pt', 'de 1.234.567 chaves'],
    ['sv', 'av 1\u00a0234\u00a0567 nycklar'],
  ])('%s: a number with thousands separators, as Intl.NumberFormat groups it', (lang, text) => {
    expect(translator(CATALOGUE, lang).t('cards.ofKeys', { count: 1_234_567 })).toBe(text);
    expect(text).toContain(new Intl.NumberFormat(lang).format(1_234_567));
  });

  it('dates in the language: a Dutch month is Dutch', () => {
    const at = Date.UTC(2026, 2, 5, 12, 0, 0);
    expect(translator(CATALOGUE, 'nl').clock(at)).toContain('mrt');
    expect(translator(CATALOGUE, 'sv').clock(at)).toContain('mars');
    expect(translator(CATALOGUE, 'en').clock(at)).toContain('Mar');
  });

  it('picks the stored language, else the first of the browser\'s that the catalogue has, else English', () => {
    expect(pickLanguage('sv', ['nl-NL'], LANGUAGES)).toBe('sv');
    expect(pickLanguage(null, ['de-DE', 'pt-BR', 'nl'], LANGUAGES)).toBe('pt');
    expect(pickLanguage('xx', ['de-DE'], LANGUAGES)).toBe('en');
    expect(pickLanguage(null, undefined, LANGUAGES)).toBe('en');
  });
});
