// t/177: a person settles an UNKNOWN call in a browser, JavaScript off,
// and another site's pages try to do it for them.  Debian's chromium,
// driven by puppeteer-core (which never downloads a browser).  Prints one
// JSON object of what it saw, for the test to judge.
//
//   node calls.js CHROMIUM PROFILE GATEWAY EVIL_SAME_SITE EVIL_CROSS_SITE
//                 ID_TO_RESOLVE ID_TO_LEAVE
//
// GATEWAY: http://127.0.0.1:PORT (its list at /_idem/calls/); the evil
// origins serve /evil/<id>, a page whose form posts "applied" for <id> to
// the gateway.

'use strict';

const puppeteer = require('puppeteer-core');

const [chromium, profile, gateway, evilSame, evilCross, id, other] =
    process.argv.slice(2);

async function main() {
    const out = {};
    const browser = await puppeteer.launch({
        executablePath: chromium,
        headless: true,
        userDataDir: profile,
        args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
               '--no-first-run', '--disable-background-networking',
               '--disable-component-update', '--disable-sync'],
    });

    try {
        const page = await browser.newPage();
        await page.setJavaScriptEnabled(false);
        await page.setViewport({ width: 390, height: 844 });
        page.setDefaultTimeout(20000);

        // the list, at phone width: both calls, each a link
        let res = await page.goto(gateway + '/_idem/calls/');
        out.list_status = res.status();
        out.list_ids = await page.$$eval('li.call a.id code',
                                         (els) => els.map((e) => e.textContent));
        out.list_scroll_width = await page.evaluate(
            () => document.documentElement.scrollWidth);

        // follow the call's link
        const link = await page.$(`li.call a.id[href$="/${id}"]`);
        out.link_found = link !== null;
        await Promise.all([page.waitForNavigation(), link.click()]);
        out.page_url = page.url();
        out.page_state = await page.$eval('h1.state', (e) => e.textContent);
        out.page_buttons = await page.$$eval('form.resolve button',
            (els) => els.map((e) => e.name + '=' + e.value));

        // another site's pages post "applied" to the gateway
        out.evil = [];
        for (const evil of [evilSame, evilCross]) {
            await page.goto(evil + '/evil/' + other);
            const [r] = await Promise.all([page.waitForNavigation(),
                                           page.click('button')]);
            out.evil.push({ status: r.status(),
                            body: await page.evaluate(
                                () => document.body.innerText) });
        }

        // the person resolves the call from its page
        await page.goto(out.page_url);
        await page.type('input[name=receipt]', 'pay_177');
        await page.type('input[name=by]', 'ops:browser');
        const [r] = await Promise.all([
            page.waitForNavigation(),
            page.click('button[name=outcome][value=applied]'),
        ]);
        out.resolved_status = r.status();
        out.resolved_url = page.url();
        out.resolved_chain = r.request().redirectChain()
            .map((q) => q.response() ? q.response().status() : 0);
        out.resolved_state = await page.$eval('h1.state', (e) => e.textContent);
        out.resolved_text = await page.evaluate(() => document.body.innerText);
        out.resolved_form = (await page.$('form.resolve')) !== null;

        // the list again: the call is gone, the other one stays
        res = await page.goto(gateway + '/_idem/calls/');
        out.list_after_ids = await page.$$eval('li.call a.id code',
            (els) => els.map((e) => e.textContent));
    } finally {
        await browser.close();
    }

    process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((e) => {
    process.stderr.write(String(e && e.stack || e) + '\n');
    process.exit(1);
});
