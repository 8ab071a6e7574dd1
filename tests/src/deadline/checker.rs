//! The check that no wait in hack/ or the tests goes without a deadline: the rules, each with a
//! test that it catches a bad snippet, and the run over the repository's own files.
use std::path::{Path, PathBuf};

/// One offence: the line (from 1) and why.
type Finding = (usize, String);

// ---- Shell: a rough lexer, enough for hack/'s scripts ------------------------------------

/// A token of a shell script.
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    /// A word as written (quotes kept), and the line it starts on.
    Word(String, usize),
    /// A redirection operator (`>`, `2>&`, `<<`...): it and the word after it are no argument.
    Redir,
    /// What ends a simple command: `;` `;;` `&` `&&` `|` `||` `(` `)` or a newline.
    Sep(&'static str),
}

/// A shell script as token streams: the script itself first, then the text of every
/// command substitution (`$(...)`, `<(...)`), each a stream of its own. Comments, heredoc
/// bodies and the `\` of a continued line are gone; quoted text stays inside its word.
struct Lexer {
    s: Vec<char>,
    i: usize,
    line: usize,
    heredocs: Vec<String>,
    streams: Vec<Vec<Tok>>,
    /// The comments: their line and text (after the `#`).
    comments: Vec<(usize, String)>,
}

/// A script's token streams and its comments.
fn lex(text: &str) -> (Vec<Vec<Tok>>, Vec<(usize, String)>) {
    let mut lexer = Lexer {
        s: text.chars().collect(),
        i: 0,
        line: 1,
        heredocs: Vec::new(),
        streams: Vec::new(),
        comments: Vec::new(),
    };
    let top = lexer.stream(false);
    let mut streams = vec![top];
    streams.append(&mut lexer.streams);
    (streams, lexer.comments)
}

fn lex_shell(text: &str) -> Vec<Vec<Tok>> {
    lex(text).0
}

/// The lines that carry a `# no deadline: REASON` comment: a wait there is meant to last
/// until something else ends it (the foreground of `make run` waits for Ctrl-C), and the
/// comment says what.
fn opted_out(text: &str) -> Vec<usize> {
    lex(text)
        .1
        .into_iter()
        .filter(|(_, comment)| {
            comment
                .trim()
                .strip_prefix("no deadline:")
                .is_some_and(|reason| !reason.trim().is_empty())
        })
        .map(|(line, _)| line)
        .collect()
}

impl Lexer {
    fn at(&self, k: usize) -> Option<char> {
        self.s.get(self.i + k).copied()
    }

    /// Lexes commands up to the end, or (in a substitution) up to its unmatched `)`.
    fn stream(&mut self, substitution: bool) -> Vec<Tok> {
        let mut toks = Vec::new();
        let mut depth = 0;
        while let Some(c) = self.at(0) {
            match c {
                '\n' => {
                    self.i += 1;
                    self.line += 1;
                    toks.push(Tok::Sep("\n"));
                    self.skip_heredocs();
                }
                ' ' | '\t' | '\r' => self.i += 1,
                '\\' if self.at(1) == Some('\n') => {
                    self.i += 2;
                    self.line += 1;
                }
                '#' => {
                    let start = self.i + 1;
                    while self.at(0).is_some_and(|c| c != '\n') {
                        self.i += 1;
                    }
                    let comment = self.s[start.min(self.i)..self.i].iter().collect();
                    self.comments.push((self.line, comment));
                }
                ';' => {
                    let two = matches!(self.at(1), Some(';' | '&'));
                    self.i += if two { 2 } else { 1 };
                    toks.push(Tok::Sep(if two { ";;" } else { ";" }));
                }
                '&' if self.at(1) == Some('>') => self.redirection(&mut toks),
                '&' | '|' => {
                    let two = self.at(1) == Some(c) || (c == '|' && self.at(1) == Some('&'));
                    self.i += if two { 2 } else { 1 };
                    toks.push(Tok::Sep(match (c, two) {
                        ('&', true) => "&&",
                        ('&', false) => "&",
                        ('|', true) => "||",
                        _ => "|",
                    }));
                }
                '(' => {
                    self.i += 1;
                    depth += 1;
                    toks.push(Tok::Sep("("));
                }
                ')' => {
                    self.i += 1;
                    if substitution && depth == 0 {
                        return toks;
                    }
                    depth -= 1;
                    toks.push(Tok::Sep(")"));
                }
                '<' | '>' if self.at(1) == Some('(') => {
                    self.i += 2;
                    let inner = self.stream(true);
                    self.streams.push(inner);
                }
                '<' | '>' => self.redirection(&mut toks),
                _ => {
                    let line = self.line;
                    let word = self.word();
                    if word.chars().all(|c| c.is_ascii_digit())
                        && matches!(self.at(0), Some('<' | '>'))
                    {
                        // A file descriptor: `2>`.
                        continue;
                    }
                    if word.is_empty() {
                        self.i += 1;
                    } else {
                        toks.push(Tok::Word(word, line));
                    }
                }
            }
        }
        toks
    }

    /// A redirection operator; after `<<` or `<<-` the word is a heredoc's delimiter.
    fn redirection(&mut self, toks: &mut Vec<Tok>) {
        let mut op = String::new();
        while let Some(c) = self
            .at(0)
            .filter(|c| matches!(c, '<' | '>' | '&' | '|' | '-'))
        {
            // `>&-` closes; `<<-` strips tabs; a `-` starts no word here.
            if c == '-' && !(op == "<<" || op.ends_with('&')) {
                break;
            }
            op.push(c);
            self.i += 1;
        }
        toks.push(Tok::Redir);
        if op == "<<" || op == "<<-" {
            while matches!(self.at(0), Some(' ' | '\t')) {
                self.i += 1;
            }
            let delimiter = unquote(&self.word());
            self.heredocs.push(delimiter);
        }
    }

    /// Skips the bodies of the heredocs opened on the line just ended.
    fn skip_heredocs(&mut self) {
        for delimiter in std::mem::take(&mut self.heredocs) {
            while self.i < self.s.len() {
                let end = (self.i..self.s.len())
                    .find(|k| self.s[*k] == '\n')
                    .unwrap_or(self.s.len());
                let line: String = self.s[self.i..end].iter().collect();
                self.i = (end + 1).min(self.s.len());
                self.line += 1;
                if line.trim() == delimiter {
                    break;
                }
            }
        }
    }

    /// One word, quotes and expansions included; command substitutions in it are lexed as
    /// streams of their own.
    fn word(&mut self) -> String {
        let start = self.i;
        while let Some(c) = self.at(0) {
            match c {
                ' ' | '\t' | '\r' | '\n' | ';' | '&' | '|' | '(' | ')' | '<' | '>' => break,
                '\\' => {
                    if self.at(1) == Some('\n') {
                        self.line += 1;
                    }
                    self.i += 2;
                }
                '\'' => self.single_quoted(),
                '"' => self.double_quoted(),
                '`' => self.backquoted(),
                '$' => self.dollar(),
                _ => self.i += 1,
            }
        }
        let end = self.i.min(self.s.len());
        self.s[start..end].iter().collect()
    }

    fn single_quoted(&mut self) {
        self.i += 1;
        while let Some(c) = self.at(0) {
            self.i += 1;
            match c {
                '\'' => return,
                '\n' => self.line += 1,
                _ => {}
            }
        }
    }

    fn double_quoted(&mut self) {
        self.i += 1;
        while let Some(c) = self.at(0) {
            match c {
                '"' => {
                    self.i += 1;
                    return;
                }
                '\\' => {
                    if self.at(1) == Some('\n') {
                        self.line += 1;
                    }
                    self.i += 2;
                }
                '$' => self.dollar(),
                '`' => self.backquoted(),
                '\n' => {
                    self.line += 1;
                    self.i += 1;
                }
                _ => self.i += 1,
            }
        }
    }

    fn backquoted(&mut self) {
        self.i += 1;
        while let Some(c) = self.at(0) {
            self.i += 1;
            match c {
                '`' => return,
                '\\' => self.i += 1,
                '\n' => self.line += 1,
                _ => {}
            }
        }
    }

    /// `$(...)` (a stream of its own), `$((...))`, `${...}`, `$'...'` or a plain `$`.
    fn dollar(&mut self) {
        match (self.at(1), self.at(2)) {
            (Some('('), Some('(')) => {
                // Arithmetic: to the matching `))`.
                self.i += 3;
                let mut depth = 0;
                while let Some(c) = self.at(0) {
                    self.i += 1;
                    match c {
                        '(' => depth += 1,
                        ')' if depth > 0 => depth -= 1,
                        ')' => {
                            if self.at(0) == Some(')') {
                                self.i += 1;
                            }
                            return;
                        }
                        '\n' => self.line += 1,
                        _ => {}
                    }
                }
            }
            (Some('('), _) => {
                self.i += 2;
                let inner = self.stream(true);
                self.streams.push(inner);
            }
            (Some('{'), _) => {
                self.i += 2;
                let mut depth = 0;
                while let Some(c) = self.at(0) {
                    match c {
                        '}' if depth == 0 => {
                            self.i += 1;
                            return;
                        }
                        '}' => {
                            depth -= 1;
                            self.i += 1;
                        }
                        '{' => {
                            depth += 1;
                            self.i += 1;
                        }
                        '"' => self.double_quoted(),
                        '\'' => self.single_quoted(),
                        '$' => self.dollar(),
                        '\\' => self.i += 2,
                        '\n' => {
                            self.line += 1;
                            self.i += 1;
                        }
                        _ => self.i += 1,
                    }
                }
            }
            (Some('\''), _) => {
                self.i += 2;
                while let Some(c) = self.at(0) {
                    self.i += 1;
                    match c {
                        '\'' => return,
                        '\\' => self.i += 1,
                        '\n' => self.line += 1,
                        _ => {}
                    }
                }
            }
            _ => self.i += 1,
        }
    }
}

/// A word without its quotes and escapes: `"${kubectl[@]}"` is `${kubectl[@]}`.
fn unquote(word: &str) -> String {
    let mut out = String::new();
    let mut chars = word.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {}
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    out
}

/// The last path component of an unquoted word: `$cache/bin/helm` is `helm`.
fn base(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// The reserved words that may come before a command: its command is the word after them.
const KEYWORDS: &[&str] = &[
    "!", "{", "}", "if", "then", "elif", "else", "fi", "do", "done", "while", "until", "time",
    "exec",
];

/// One simple command: its words (redirections left out) with their lines, the reserved words
/// before it, and the index in `words` of its command (None when it is only reserved words
/// and assignments).
#[derive(Debug)]
struct Simple {
    words: Vec<(String, usize)>,
    keywords: Vec<String>,
    command: Option<usize>,
    /// Whether it opens a function body: `NAME ( ) {` (the `{` is this command's).
    opens_function: bool,
}

impl Simple {
    fn command_word(&self) -> Option<&str> {
        self.command.map(|c| self.words[c].0.as_str())
    }

    fn line(&self) -> usize {
        self.words.first().map(|w| w.1).unwrap_or(0)
    }

    /// Its unquoted words.
    fn plain(&self) -> Vec<String> {
        self.words.iter().map(|(w, _)| unquote(w)).collect()
    }
}

/// The simple commands of one token stream, in order.
fn simple_commands(toks: &[Tok]) -> Vec<Simple> {
    let mut out = Vec::new();
    let mut words = Vec::new();
    let mut skip_next = false;
    let mut function_header = false;
    let flush = |words: &mut Vec<(String, usize)>, out: &mut Vec<Simple>, function: bool| {
        if words.is_empty() {
            return;
        }
        let words = std::mem::take(words);
        let mut keywords = Vec::new();
        let mut command = None;
        for (k, (w, _)) in words.iter().enumerate() {
            if KEYWORDS.contains(&w.as_str()) {
                keywords.push(w.clone());
                continue;
            }
            let assignment = w.split_once('=').is_some_and(|(name, _)| {
                let name = name.strip_suffix('+').unwrap_or(name);
                !name.is_empty()
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && !name.starts_with(|c: char| c.is_ascii_digit())
            });
            if assignment {
                continue;
            }
            command = Some(k);
            break;
        }
        let opens_function = function && keywords.first().is_some_and(|k| k == "{");
        out.push(Simple {
            words,
            keywords,
            command,
            opens_function,
        });
    };
    for (k, tok) in toks.iter().enumerate() {
        match tok {
            Tok::Redir => skip_next = true,
            Tok::Word(w, line) => {
                if skip_next {
                    skip_next = false;
                } else {
                    words.push((w.clone(), *line));
                }
            }
            Tok::Sep(sep) => {
                skip_next = false;
                // `NAME ( )`: the next command is a function's body.
                let header = *sep == ")"
                    && matches!(toks.get(k.wrapping_sub(1)), Some(Tok::Sep("(")))
                    && words.len() == 1;
                if header {
                    words.clear();
                    function_header = true;
                    continue;
                }
                if *sep == "(" && words.len() == 1 {
                    // Maybe a function header: decided at the `)`.
                    continue;
                }
                if *sep == "\n" && function_header && words.is_empty() {
                    continue;
                }
                flush(&mut words, &mut out, function_header);
                if !words.is_empty() || out.last().is_some() {
                    function_header = false;
                }
            }
        }
    }
    flush(&mut words, &mut out, function_header);
    out
}

/// Every simple command of a script, over all its streams.
fn all_commands(text: &str) -> Vec<Simple> {
    lex_shell(text)
        .iter()
        .flat_map(|toks| simple_commands(toks))
        .collect()
}

/// Whether `words[i]` runs a tool: its name, or an array expansion (`${kubectl[@]}`,
/// `${k[@]}`) when `any_array` (an array runs kubectl by convention in hack/).
fn runs(word: &str, tool: &str, any_array: bool) -> bool {
    base(word) == tool
        || word.contains(&format!("{tool}[@]"))
        || (any_array && word.contains("[@]"))
}

/// Whether the command is bounded by a flag (`--timeout`, `--max-time`...) or runs under
/// coreutils' `timeout`.
fn bounded(cmd: &Simple, plain: &[String], flag: impl Fn(&str) -> bool) -> bool {
    cmd.command_word() == Some("timeout") || plain.iter().any(|w| flag(w))
}

/// S1: the `wait` builtin, at a command position, only in hack/lib.sh (its deadline helpers).
fn s1_wait_builtin(file: &str, text: &str) -> Vec<Finding> {
    if file == "hack/lib.sh" {
        return Vec::new();
    }
    all_commands(text)
        .iter()
        .filter(|c| c.command_word() == Some("wait"))
        .map(|c| {
            (
                c.words[c.command.unwrap_or(0)].1,
                "the `wait` builtin has no deadline: wait_job PID SECONDS WHAT (hack/lib.sh)"
                    .to_string(),
            )
        })
        .collect()
}

/// S2: `kubectl wait` and `kubectl rollout status` (by name or as an array, `"${kubectl[@]}"`;
/// global flags such as `-n NS` may come between) carry `--timeout`.
fn s2_kubectl_waits(text: &str) -> Vec<Finding> {
    let mut found = Vec::new();
    for cmd in all_commands(text) {
        let plain = cmd.plain();
        for (i, word) in plain.iter().enumerate() {
            if !runs(word, "kubectl", true) {
                continue;
            }
            let mut j = i + 1;
            while let Some(flag) = plain.get(j) {
                if matches!(
                    flag.as_str(),
                    "-n" | "--namespace" | "--kubeconfig" | "--context" | "--as"
                ) {
                    j += 2;
                } else if flag.starts_with("--") && flag.contains('=') {
                    j += 1;
                } else {
                    break;
                }
            }
            let verb = match (plain.get(j).map(String::as_str), plain.get(j + 1)) {
                (Some("wait"), _) => "wait",
                (Some("rollout"), Some(s)) if s == "status" => "rollout status",
                _ => continue,
            };
            if !bounded(&cmd, &plain, |w| w.starts_with("--timeout")) {
                found.push((
                    cmd.words[i].1,
                    format!("`kubectl {verb}` without --timeout"),
                ));
            }
        }
    }
    found
}

/// S3: a helm command with `--wait` carries `--timeout`.
fn s3_helm_waits(text: &str) -> Vec<Finding> {
    let mut found = Vec::new();
    for cmd in all_commands(text) {
        let plain = cmd.plain();
        let Some(i) = plain.iter().position(|w| runs(w, "helm", false)) else {
            continue;
        };
        let waits = plain[i..]
            .iter()
            .any(|w| w == "--wait" || (w.starts_with("--wait=") && w != "--wait=false"));
        if waits && !bounded(&cmd, &plain, |w| w.starts_with("--timeout")) {
            found.push((
                cmd.words[i].1,
                "`helm --wait` without --timeout".to_string(),
            ));
        }
    }
    found
}

/// S4: an `until`/`while` loop that sleeps (`sleep`, `nap`) mentions `deadline` or `SECONDS`.
/// Exempt: `while read` loops, loops on a deadline helper (`until wait_for ...`), and loops
/// in the functions of hack/lib.sh (the deadline helpers themselves).
fn s4_sleeping_loops(file: &str, text: &str) -> Vec<Finding> {
    let mut found = Vec::new();
    for toks in lex_shell(text) {
        let cmds = simple_commands(&toks);
        // Open loops: (keyword, its command's index, exempt); functions: brace depths.
        let mut loops: Vec<(String, usize, bool)> = Vec::new();
        let mut function_depth: Option<usize> = None;
        let mut braces = 0usize;
        for (k, cmd) in cmds.iter().enumerate() {
            for (n, keyword) in cmd.keywords.iter().enumerate() {
                match keyword.as_str() {
                    "{" => {
                        braces += 1;
                        if n == 0 && cmd.opens_function && function_depth.is_none() {
                            function_depth = Some(braces);
                        }
                    }
                    "}" => {
                        if function_depth == Some(braces) {
                            function_depth = None;
                        }
                        braces = braces.saturating_sub(1);
                    }
                    "while" | "until" => {
                        let condition = cmd.command_word().map(unquote).unwrap_or_default();
                        let exempt = matches!(condition.as_str(), "read" | "wait_for" | "wait_job")
                            || (file == "hack/lib.sh" && function_depth.is_some());
                        loops.push((keyword.clone(), k, exempt));
                    }
                    "done" => {
                        let Some((keyword, start, exempt)) = loops.pop() else {
                            continue;
                        };
                        if exempt || keyword == "for" {
                            continue;
                        }
                        let body = &cmds[start..=k];
                        let sleeps = body.iter().any(|c| {
                            matches!(
                                c.command_word().map(unquote).as_deref(),
                                Some("sleep" | "nap")
                            )
                        });
                        let text: String = body
                            .iter()
                            .flat_map(|c| c.words.iter().map(|w| w.0.as_str()))
                            .collect::<Vec<_>>()
                            .join(" ");
                        let bounded =
                            text.to_lowercase().contains("deadline") || text.contains("SECONDS");
                        if sleeps && !bounded {
                            found.push((
                                cmds[start].line(),
                                format!(
                                    "`{keyword}` loop that sleeps without a deadline: check \
                                     $SECONDS against a deadline, or use wait_for (hack/lib.sh)"
                                ),
                            ));
                        }
                    }
                    _ => {}
                }
            }
            // `for` and `select` loops end with `done` too.
            if matches!(cmd.command_word(), Some("for" | "select")) {
                loops.push(("for".to_string(), k, true));
            }
        }
    }
    found
}

/// S5: a `curl` carries `--max-time` (or `-m`).
fn s5_curl(text: &str) -> Vec<Finding> {
    let mut found = Vec::new();
    for cmd in all_commands(text) {
        let plain = cmd.plain();
        for (i, word) in plain.iter().enumerate() {
            // curl as the command, or as one's argument with its own options (`wait_for WHAT
            // 30 curl -sf URL`), not as a package name (`apt-get install curl jq`).
            let called = base(word) == "curl"
                && (cmd.command == Some(i) || plain.get(i + 1).is_some_and(|w| w.starts_with('-')));
            let limited = |w: &str| {
                w == "-m"
                    || w.starts_with("--max-time")
                    || w.strip_prefix("-m")
                        .is_some_and(|n| n.parse::<f64>().is_ok())
            };
            if called && !bounded(&cmd, &plain[i..], limited) {
                found.push((cmd.words[i].1, "curl without --max-time".to_string()));
            }
        }
    }
    found
}

/// Every shell rule over one file, but on the lines that opt out with a reason.
fn shell_findings(file: &str, text: &str) -> Vec<Finding> {
    let mut found = s1_wait_builtin(file, text);
    found.extend(s2_kubectl_waits(text));
    found.extend(s3_helm_waits(text));
    found.extend(s4_sleeping_loops(file, text));
    found.extend(s5_curl(text));
    let opted_out = opted_out(text);
    found.retain(|(line, _)| !opted_out.contains(line));
    found
}

// ---- Rust ----------------------------------------------------------------------------------

/// The code of a Rust file with the text of its comments, strings and char literals blanked
/// (newlines kept), so that brackets and words in them count for nothing.
fn rust_code(text: &str) -> Vec<u8> {
    let s = text.as_bytes();
    let mut out = s.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for b in &mut out[from.min(s.len())..to.min(s.len())] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
    };
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    while i < s.len() {
        let after_ident = i > 0 && ident(s[i - 1]);
        match s[i] {
            b'/' if s.get(i + 1) == Some(&b'/') => {
                let end = (i..s.len()).find(|k| s[*k] == b'\n').unwrap_or(s.len());
                blank(&mut out, i, end);
                i = end;
            }
            b'/' if s.get(i + 1) == Some(&b'*') => {
                let (mut depth, mut k) = (0, i);
                while k < s.len() {
                    if s[k..].starts_with(b"/*") {
                        depth += 1;
                        k += 2;
                    } else if s[k..].starts_with(b"*/") {
                        depth -= 1;
                        k += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        k += 1;
                    }
                }
                blank(&mut out, i, k);
                i = k;
            }
            b'r' | b'b' | b'c' if !after_ident && raw_string(s, i).is_some() => {
                let (open, close, end) = raw_string(s, i).unwrap_or((i, i, i + 1));
                blank(&mut out, open, close);
                i = end;
            }
            b'"' => {
                let mut k = i + 1;
                while k < s.len() && s[k] != b'"' {
                    k += if s[k] == b'\\' { 2 } else { 1 };
                }
                blank(&mut out, i + 1, k);
                i = k + 1;
            }
            b'\'' => {
                // A char literal ('x', '\n', '\u{1F600}', 'é') or a lifetime ('a).
                if s.get(i + 1) == Some(&b'\\') {
                    let k = (i + 3..s.len()).find(|k| s[*k] == b'\'').unwrap_or(s.len());
                    blank(&mut out, i + 1, k);
                    i = k + 1;
                } else {
                    let width = text
                        .get(i + 1..)
                        .and_then(|t| t.chars().next())
                        .map_or(1, char::len_utf8);
                    if s.get(i + 1 + width) == Some(&b'\'') {
                        blank(&mut out, i + 1, i + 1 + width);
                        i += 2 + width;
                    } else {
                        i += 1;
                    }
                }
            }
            _ => i += 1,
        }
    }
    out
}

/// A raw string at `i` (`r"..."`, `r#"..."#`, `br"..."`, `cr"..."`): where its text starts,
/// where it ends and the index after it.
fn raw_string(s: &[u8], i: usize) -> Option<(usize, usize, usize)> {
    let mut k = i;
    if s[k] != b'r' {
        k += 1;
    }
    if s.get(k) != Some(&b'r') {
        return None;
    }
    k += 1;
    let hashes = s[k..].iter().take_while(|b| **b == b'#').count();
    k += hashes;
    if s.get(k) != Some(&b'"') {
        return None;
    }
    let open = k + 1;
    let mut closing = vec![b'"'];
    closing.extend(std::iter::repeat_n(b'#', hashes));
    let close = (open..s.len())
        .find(|j| s[*j..].starts_with(&closing))
        .unwrap_or(s.len());
    Some((open, close, close + closing.len()))
}

fn line_of(code: &[u8], at: usize) -> usize {
    1 + code[..at.min(code.len())]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
}

/// The byte range of the statement around `at`: back to the `;`, `{` or `}` before it at its
/// own depth, forward to its `;` or the end of the enclosing block or call.
fn statement(code: &[u8], at: usize) -> (usize, usize) {
    let (mut start, mut depth) = (0, 0usize);
    let mut i = at;
    while i > 0 {
        i -= 1;
        match code[i] {
            b')' | b']' => depth += 1,
            b'(' | b'[' => depth = depth.saturating_sub(1),
            b'}' if depth > 0 => depth += 1,
            b'{' if depth > 0 => depth -= 1,
            b';' | b'{' | b'}' if depth == 0 => {
                start = i + 1;
                break;
            }
            _ => {}
        }
    }
    let (mut end, mut depth) = (code.len(), 0usize);
    for (k, b) in code.iter().enumerate().skip(at) {
        match b {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' if depth == 0 => {
                end = k;
                break;
            }
            b')' | b']' | b'}' => depth -= 1,
            b';' if depth == 0 => {
                end = k;
                break;
            }
            _ => {}
        }
    }
    (start, end)
}

/// The index of the bracket that closes the one at `open` (or the end).
fn closing(code: &[u8], open: usize) -> usize {
    let mut depth = 0usize;
    for (k, b) in code.iter().enumerate().skip(open) {
        match b {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return k;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// The offsets of `needle` in `code`; with `word`, only where no identifier character is
/// on either side.
fn find_all(code: &[u8], needle: &str, word: bool) -> Vec<usize> {
    let needle = needle.as_bytes();
    let ident = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_');
    (0..code.len().saturating_sub(needle.len() - 1))
        .filter(|k| code[*k..].starts_with(needle))
        .filter(|k| {
            !word
                || (!ident(k.checked_sub(1).and_then(|p| code.get(p)))
                    && !ident(code.get(k + needle.len())))
        })
        .collect()
}

fn contains_word(code: &[u8], word: &str) -> bool {
    !find_all(code, word, true).is_empty()
}

/// The names bound to a `Command` in a file: `let mut curl = Command::new(..)`,
/// `cmd: &mut Command`; and `cmd`, `command` always.
fn command_names(code: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(code);
    let mut names = vec!["cmd".to_string(), "command".to_string()];
    for (k, _) in text.match_indices("Command") {
        let before = text[..k].trim_end();
        let before = before
            .strip_suffix("std::process::")
            .unwrap_or(before)
            .trim_end();
        let binding = before
            .strip_suffix('=')
            .or_else(|| before.strip_suffix(": &mut"))
            .or_else(|| before.strip_suffix(':'));
        if let Some(binding) = binding {
            let name: String = binding
                .trim_end()
                .chars()
                .rev()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            if !name.is_empty() {
                names.push(name);
            }
        }
    }
    names
}

/// R1: a child process is waited for only through deadline.rs: no `.output()`, no
/// `wait_with_output(`, no `.status()` of a `Command` (a statement that holds `Command` or a
/// name bound to one), and `.wait()` only right after `.kill()` (same or previous statement).
fn r1_child_waits(text: &str) -> Vec<Finding> {
    let code = rust_code(text);
    let mut found = Vec::new();
    for at in find_all(&code, ".output()", false) {
        found.push((
            line_of(&code, at),
            "`.output()` has no deadline: output_within (tests/src/deadline.rs)".to_string(),
        ));
    }
    for at in find_all(&code, "wait_with_output(", false) {
        found.push((
            line_of(&code, at),
            "`wait_with_output()` has no deadline: output_within (tests/src/deadline.rs)"
                .to_string(),
        ));
    }
    let names = command_names(&code);
    for at in find_all(&code, ".status()", false) {
        let (start, end) = statement(&code, at);
        let stmt = &code[start..end];
        if contains_word(stmt, "Command") || names.iter().any(|n| contains_word(stmt, n)) {
            found.push((
                line_of(&code, at),
                "a `Command`'s `.status()` has no deadline: output_within (tests/src/deadline.rs)"
                    .to_string(),
            ));
        }
    }
    for at in find_all(&code, ".wait()", false) {
        let (start, end) = statement(&code, at);
        let mut killed = !find_all(&code[start..end], ".kill()", false).is_empty();
        let before = code[..start].iter().rposition(|b| !b.is_ascii_whitespace());
        if let Some(semicolon) = before.filter(|p| code[*p] == b';') {
            let (s, e) = statement(&code, semicolon);
            killed |= !find_all(&code[s..e], ".kill()", false).is_empty();
        }
        if !killed {
            found.push((line_of(&code, at), "`.wait()` without a `.kill()` just before has no deadline: stop_child or output_within (tests/src/deadline.rs)".to_string()));
        }
    }
    found
}

/// R2: a `loop {` whose body names no deadline (`deadline`, `Instant`, `timeout`, `elapsed`
/// or `eventually`, in code, not in comments or strings), and a bare channel `.recv()`.
fn r2_loops(text: &str) -> Vec<Finding> {
    let code = rust_code(text);
    let mut found = Vec::new();
    for at in find_all(&code, "loop", true) {
        let open = at
            + 4
            + code[at + 4..]
                .iter()
                .take_while(|b| b.is_ascii_whitespace())
                .count();
        if code.get(open) != Some(&b'{') {
            continue;
        }
        let close = closing(&code, open);
        let body = String::from_utf8_lossy(&code[open..close]).to_lowercase();
        let bounded = ["deadline", "instant", "timeout", "elapsed", "eventually"]
            .iter()
            .any(|w| body.contains(w));
        if !bounded {
            found.push((
                line_of(&code, at),
                "`loop` without a deadline: eventually (tests/src/waits.rs), or check an Instant"
                    .to_string(),
            ));
        }
    }
    for at in find_all(&code, ".recv()", false) {
        found.push((
            line_of(&code, at),
            "`.recv()` has no deadline: recv_timeout".to_string(),
        ));
    }
    found
}

fn rust_findings(text: &str) -> Vec<Finding> {
    let mut found = r1_child_waits(text);
    found.extend(r2_loops(text));
    found
}

// ---- The repository ----------------------------------------------------------------------

fn repo_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(Path::to_path_buf).unwrap_or(manifest)
}

fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, into)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
    Ok(())
}

/// The files the rules read, relative to the repository root: hack/*.sh and .ci/run; tests/src
/// and tests/e2e (but this file).
fn checked_files(root: &Path) -> std::io::Result<(Vec<String>, Vec<String>)> {
    let relative = |p: &Path| {
        p.strip_prefix(root)
            .unwrap_or(p)
            .to_string_lossy()
            .into_owned()
    };
    let mut shell: Vec<String> = std::fs::read_dir(root.join("hack"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "sh"))
        .map(|p| relative(&p))
        .collect();
    if root.join(".ci/run").is_file() {
        shell.push(".ci/run".to_string());
    }
    shell.sort();
    let mut rust = Vec::new();
    rust_files(&root.join("tests/src"), &mut rust)?;
    rust_files(&root.join("tests/e2e"), &mut rust)?;
    let mut rust: Vec<String> = rust
        .iter()
        .map(|p| relative(p))
        .filter(|p| p != "tests/src/deadline.rs")
        .collect();
    rust.sort();
    Ok((shell, rust))
}

#[test]
fn no_wait_without_a_deadline_in_hack_or_the_tests() -> std::io::Result<()> {
    let root = repo_root();
    let (shell, rust) = checked_files(&root)?;
    assert!(shell.iter().any(|f| f == "hack/lib.sh"), "{shell:?}");
    assert!(rust.iter().any(|f| f == "tests/src/kubectl.rs"), "{rust:?}");
    let mut offences = Vec::new();
    for file in &shell {
        let text = std::fs::read_to_string(root.join(file))?;
        let mut found = shell_findings(file, &text);
        found.sort();
        offences.extend(
            found
                .into_iter()
                .map(|(line, why)| format!("{file}:{line}: {why}")),
        );
    }
    for file in &rust {
        let text = std::fs::read_to_string(root.join(file))?;
        let mut found = rust_findings(&text);
        found.sort();
        offences.extend(
            found
                .into_iter()
                .map(|(line, why)| format!("{file}:{line}: {why}")),
        );
    }
    assert!(
        offences.is_empty(),
        "{} waits without a deadline:\n{}",
        offences.len(),
        offences.join("\n")
    );
    Ok(())
}

// ---- The rules' own tests: each catches a bad snippet and accepts a good one --------------

fn lines(found: Vec<Finding>) -> Vec<usize> {
    let mut lines: Vec<usize> = found.into_iter().map(|(line, _)| line).collect();
    lines.sort();
    lines
}

#[test]
fn s1_catches_the_wait_builtin_outside_lib_sh() {
    let bad = "sleep 1 &\nwait\nx=1; wait \"$pid\"\ntrue && wait $!\n{ wait; }\nif true; then wait; fi\n! wait\ncmd & wait\nwhile true; do wait; done\n";
    assert_eq!(
        lines(s1_wait_builtin("hack/e2e.sh", bad)),
        [2, 3, 4, 5, 6, 7, 8, 9]
    );
    assert_eq!(lines(s1_wait_builtin("hack/e2e.sh", "x=$(wait)\n")), [1]);
    let good = "helm install --wait=false x\nkubectl wait --for=x --timeout=1s\nwait_job \"$pid\" 60 build\nwait_for node 90 true\n# wait here\nlog \"wait for it\" # then wait\ncat <<EOF\nwait\nEOF\necho '\nwait\n'\n";
    assert_eq!(s1_wait_builtin("hack/e2e.sh", good), []);
    assert_eq!(s1_wait_builtin("hack/lib.sh", bad), []);
}

#[test]
fn s2_catches_kubectl_waits_without_timeout() {
    let bad = "kubectl wait --for=condition=Ready node/x\n\"${kubectl[@]}\" rollout status deployment/a\nout=$(\"${k[@]}\" -n \"$ns\" wait pod/x)\n\"${kubectl[@]}\" wait \\\n  --for=condition=Ready pod/a\n";
    assert_eq!(lines(s2_kubectl_waits(bad)), [1, 2, 3, 4]);
    let good = "kubectl wait --for=x pod/a --timeout=60s\n\"${kubectl[@]}\" rollout status deploy/a -n x --timeout \"${t}s\"\nwait_for node 90 \"${kubectl[@]}\" wait --for=condition=Ready node/x \\\n  --timeout=2s\nkubectl get pods\nlog \"kubectl wait for it\"\ntimeout 60 kubectl wait --for=x pod/a\n";
    assert_eq!(s2_kubectl_waits(good), []);
}

#[test]
fn s3_catches_helm_wait_without_timeout() {
    let bad = "\"${helm[@]}\" uninstall r -n x --wait --ignore-not-found\n\"$cache/bin/helm\" upgrade --install r c \\\n  --wait\n";
    assert_eq!(lines(s3_helm_waits(bad)), [1, 2]);
    let good = "\"${helm[@]}\" uninstall r --wait --timeout 2m\nhelm install r c --wait=false\nhelm template r c\nstep \"helm upgrade --wait (60s)\"\n";
    assert_eq!(s3_helm_waits(good), []);
}

#[test]
fn s4_catches_sleeping_loops_without_a_deadline() {
    let bad = "until curl -sf --max-time 2 x; do\n  sleep 1\ndone\nwhile hack/node.sh status; do nap 5; done\nwhile true; do\n  for i in 1 2; do echo; done\n  sleep 1\ndone\n";
    assert_eq!(lines(s4_sleeping_loops("hack/run.sh", bad)), [1, 4, 5]);
    let good = "deadline=$((SECONDS + 60))\nuntil ready; do\n  [ \"$SECONDS\" -lt \"$deadline\" ] || die late\n  sleep 1\ndone\nwhile IFS= read -r line; do sleep 0; done\nwhile read -r m; do umount \"$m\"; done\nfor _ in $(seq 1 50); do sleep 0.1; done\nwhile kill -0 \"$p\"; do echo; done\nuntil wait_for x 30 true; do sleep 1; done\n";
    assert_eq!(s4_sleeping_loops("hack/run.sh", good), []);
    // The helpers of hack/lib.sh are the deadlines; not loops elsewhere in it.
    let helper = "nap() {\n  while true; do sleep 1; done\n}\nwhile true; do sleep 1; done\n";
    assert_eq!(lines(s4_sleeping_loops("hack/lib.sh", helper)), [4]);
    assert_eq!(lines(s4_sleeping_loops("hack/x.sh", helper)), [2, 4]);
}

#[test]
fn s5_catches_curl_without_max_time() {
    let bad = "curl -sf https://x\nwait_for web 30 curl -sf \"$url\"\nout=$(curl -s \"$u\")\n";
    assert_eq!(lines(s5_curl(bad)), [1, 2, 3]);
    let good = "curl -sf --max-time 5 https://x\ncurl -m 5 x\ncurl --max-time=5 x\napt-get install -y curl jq\ncommand -v curl\n# curl x\n";
    assert_eq!(s5_curl(good), []);
}

#[test]
fn a_shell_line_opts_out_only_with_a_reason() {
    let text = "while running; do nap 2; done # no deadline: the foreground, until Ctrl-C\nwhile running; do nap 2; done # no deadline:\nwhile running; do nap 2; done\n# no deadline: a comment line of its own\nwait\n";
    assert_eq!(lines(shell_findings("hack/run.sh", text)), [2, 3, 5]);
}

#[test]
fn shell_lexing_keeps_lines_across_continuations_quotes_and_heredocs() {
    let text = "a \\\n  b\ncat <<'EOF'\nx\nEOF\nc \"multi\nline\" d\ne\n";
    let cmds = all_commands(text);
    let got: Vec<(String, usize)> = cmds
        .iter()
        .map(|c| (c.command_word().unwrap_or_default().to_string(), c.line()))
        .collect();
    let want = [("a", 1), ("cat", 3), ("c", 6), ("e", 8)];
    assert_eq!(
        got,
        want.iter()
            .map(|(w, l)| (w.to_string(), *l))
            .collect::<Vec<_>>()
    );
}

#[test]
fn r1_catches_waits_on_children_without_a_deadline() {
    let bad = r#"
fn a() -> Result<()> {
let out = Command::new("x").output()?;
let mut child = Command::new("y").spawn()?;
let out = child.wait_with_output()?;
let sent = Command::new("kill")
    .args(["-TERM", "1"])
    .status()?;
let mut curl = Command::new("curl");
curl.arg("x");
let ok = curl.status()?.success();
child.wait()?;
Ok(())
}
"#;
    assert_eq!(lines(r1_child_waits(bad)), [3, 5, 8, 11, 12]);
    let good = r#"
fn a(response: Response) -> Result<()> {
let out = output_within(&mut Command::new("x"), None, LIMIT, "x")?;
let code = response.status();
// child.wait() and .output() in a comment, "or .status() in a string"
let _ = self.child.kill();
let _ = self.child.wait();
let _ = child.kill(); let _ = child.wait();
Ok(())
}
"#;
    assert_eq!(r1_child_waits(good), []);
}

#[test]
fn r2_catches_loops_and_receives_without_a_deadline() {
    let bad = r#"
fn a() {
loop {
    if ready() { break; }
    std::thread::sleep(Duration::from_millis(10)); // no deadline here
}
let x = rx.recv()?;
'outer: loop { let s = "deadline"; }
}
"#;
    assert_eq!(lines(r2_loops(bad)), [3, 7, 8]);
    let good = r#"
fn a() {
let deadline = Instant::now() + LIMIT;
let x = loop {
    if Instant::now() > deadline { break 1; }
    let c = '{';
};
let y = rx.recv_timeout(LIMIT)?;
for x in xs { loop_count += 1; }
}
"#;
    assert_eq!(r2_loops(good), []);
}

#[test]
fn rust_code_blanks_comments_strings_and_chars_only() {
    let code =
        rust_code("let a = \"x{\"; // }\nlet b = r#\"y\"}\"#; let c = '{'; fn f<'a>() {}\n/* { */");
    let code = String::from_utf8_lossy(&code);
    assert_eq!(code.matches('{').count(), 1, "{code}");
    assert_eq!(code.matches('}').count(), 1, "{code}");
    assert!(code.contains("fn f<'a>()"), "{code}");
    assert_eq!(code.lines().count(), 3);
}
