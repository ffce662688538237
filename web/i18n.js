// Every user-visible string of the web UI, in English and Chinese, and the current language.
// Elements bound with bindText/bindAttr remember their key (data-i18n…), so switching the
// language re-translates the page in place without rebuilding it (a streaming answer keeps
// streaming). Times shown with bindTime are re-formatted for the new language too.

const STORAGE_KEY = 'warden.lang';
export const LANGUAGES = ['en', 'zh'];

const STRINGS = {
  en: {
    'app.loading': 'Loading…',
    'app.name': 'Warden',
    'app.tagline': 'Self-hosted assistant',
    'lang.toggle': '中文',
    'lang.toggle_label': 'Switch the interface to Chinese',
    'login.title': 'Sign in',
    'login.intro': 'Use the account your Warden administrator gave you.',
    'login.name': 'Name',
    'login.password': 'Password',
    'login.submit': 'Sign in',
    'login.busy': 'Signing in…',
    'login.bad_credentials': 'Wrong name or password.',
    'login.too_many': 'Too many sign-in attempts. Try again in {seconds} s.',
    'login.too_many_later': 'Too many sign-in attempts. Try again later.',
    'login.missing': 'Enter your name and password.',
    'bootstrap.title': 'Create the first administrator',
    'bootstrap.intro': 'This Warden has no accounts yet. Choose the name and password of its first administrator.',
    'bootstrap.name': 'Administrator name',
    'bootstrap.password': 'Password (at least 8 characters)',
    'bootstrap.password_again': 'Password again',
    'bootstrap.submit': 'Create administrator',
    'bootstrap.busy': 'Creating…',
    'bootstrap.too_short': 'The password needs at least 8 characters.',
    'bootstrap.mismatch': 'The two passwords differ.',
    'bootstrap.missing_name': 'Enter a name.',
    'bootstrap.bad_token': 'This setup link is not valid any more. Ask for a new one, or sign in.',
    'bootstrap.to_login': 'Go to sign in',
    'error.network': 'Cannot reach the Warden server.',
    'error.generic': 'Something went wrong: {message}',
    'error.session_ended': 'Your session ended. Please sign in again.',
    'error.not_found': 'This conversation does not exist, or you cannot see it.',
    'error.dismiss': 'Dismiss',
    'header.logout': 'Sign out',
    'header.menu': 'Conversations',
    'role.admin': 'admin',
    'role.operator': 'operator',
    'role.viewer': 'viewer',
    'nav.new_chat': 'New chat',
    'nav.heading': 'Conversations',
    'nav.empty': 'No conversations yet.',
    'nav.untitled': 'Untitled',
    'nav.load_failed': 'Could not load conversations.',
    'chat.empty_title': 'How can I help?',
    'chat.empty_hint': 'Answers are generated on this server. Nothing you type leaves it.',
    'chat.loading': 'Loading conversation…',
    'suggest.disk': 'What should I check first when a disk is full?',
    'suggest.nginx': 'Nginx returns 502 after a deploy. Where do I look?',
    'suggest.lock': 'How do I find a lock wait in the database?',
    'chat.log_label': 'Messages',
    'author.user': 'You',
    'author.assistant': 'Warden',
    'composer.label': 'Message',
    'composer.placeholder': 'Ask Warden… (Enter to send, Shift+Enter for a new line)',
    'composer.send': 'Send',
    'composer.stop': 'Stop',
    'composer.stopping': 'Stopping…',
    'run.queued': 'Waiting for the model…',
    'run.running': 'Writing…',
    'run.resumed': 'The server restarted; continuing (attempt {attempt})…',
    'run.reconnecting': 'Connection lost, reconnecting…',
    'run.failed': 'The answer failed: {reason}',
    'run.cancelled': 'The answer was stopped.',
    'run.stream_lost': 'Lost the connection to this answer.',
    'run.retry': 'Retry',
    'run.failed_unknown': 'The answer failed.',
    'run.partial': 'Incomplete answer',
    'timeline.toggle': 'Timeline',
    'timeline.label': 'Run events',
    'timeline.loading': 'Loading events…',
    'timeline.empty': 'No events yet.',
    'timeline.error': 'Could not load the events.',
    'timeline.attempt': 'attempt {attempt}',
    'timeline.resumed': 'attempt {attempt}, kept {chars} chars',
    'timeline.chars': '({chars} chars)',
    'timeline.completed': '{finish} · {prompt} prompt + {completion} completion tokens',
    'timeline.plain': '{text}',
  },
  zh: {
    'app.loading': '加载中…',
    'app.name': 'Warden',
    'app.tagline': '本地部署的助手',
    'lang.toggle': 'EN',
    'lang.toggle_label': '将界面切换为英文',
    'login.title': '登录',
    'login.intro': '请使用 Warden 管理员为你创建的账号。',
    'login.name': '用户名',
    'login.password': '密码',
    'login.submit': '登录',
    'login.busy': '正在登录…',
    'login.bad_credentials': '用户名或密码错误。',
    'login.too_many': '登录尝试次数过多，请在 {seconds} 秒后重试。',
    'login.too_many_later': '登录尝试次数过多，请稍后重试。',
    'login.missing': '请输入用户名和密码。',
    'bootstrap.title': '创建第一个管理员',
    'bootstrap.intro': '这个 Warden 还没有任何账号。请设置第一个管理员的用户名和密码。',
    'bootstrap.name': '管理员用户名',
    'bootstrap.password': '密码（至少 8 个字符）',
    'bootstrap.password_again': '再次输入密码',
    'bootstrap.submit': '创建管理员',
    'bootstrap.busy': '正在创建…',
    'bootstrap.too_short': '密码至少需要 8 个字符。',
    'bootstrap.mismatch': '两次输入的密码不一致。',
    'bootstrap.missing_name': '请输入用户名。',
    'bootstrap.bad_token': '此设置链接已失效。请获取新的链接，或直接登录。',
    'bootstrap.to_login': '前往登录',
    'error.network': '无法连接 Warden 服务器。',
    'error.generic': '出错了：{message}',
    'error.session_ended': '会话已结束，请重新登录。',
    'error.not_found': '此对话不存在，或你无权查看。',
    'error.dismiss': '关闭',
    'header.logout': '退出登录',
    'header.menu': '对话列表',
    'role.admin': '管理员',
    'role.operator': '操作员',
    'role.viewer': '只读',
    'nav.new_chat': '新对话',
    'nav.heading': '对话',
    'nav.empty': '还没有对话。',
    'nav.untitled': '未命名对话',
    'nav.load_failed': '无法加载对话列表。',
    'chat.empty_title': '有什么可以帮你？',
    'chat.empty_hint': '回答在这台服务器上生成，你输入的内容不会离开它。',
    'chat.loading': '正在加载对话…',
    'suggest.disk': '磁盘满了，应该先检查什么？',
    'suggest.nginx': '部署后 Nginx 返回 502，该从哪里查起？',
    'suggest.lock': '如何找到数据库里的锁等待？',
    'chat.log_label': '消息',
    'author.user': '你',
    'author.assistant': 'Warden',
    'composer.label': '消息',
    'composer.placeholder': '向 Warden 提问…（Enter 发送，Shift+Enter 换行）',
    'composer.send': '发送',
    'composer.stop': '停止',
    'composer.stopping': '正在停止…',
    'run.queued': '等待模型…',
    'run.running': '正在生成…',
    'run.resumed': '服务器已重启，正在继续（第 {attempt} 次尝试）…',
    'run.reconnecting': '连接中断，正在重连…',
    'run.failed': '回答失败：{reason}',
    'run.cancelled': '回答已停止。',
    'run.stream_lost': '与此回答的连接已断开。',
    'run.retry': '重试',
    'run.failed_unknown': '回答失败。',
    'run.partial': '回答不完整',
    'timeline.toggle': '时间线',
    'timeline.label': '运行事件',
    'timeline.loading': '正在加载事件…',
    'timeline.empty': '暂无事件。',
    'timeline.error': '无法加载事件。',
    'timeline.attempt': '第 {attempt} 次尝试',
    'timeline.resumed': '第 {attempt} 次尝试，保留 {chars} 个字符',
    'timeline.chars': '（{chars} 个字符）',
    'timeline.completed': '{finish} · 提示 {prompt} + 生成 {completion} 个 token',
    'timeline.plain': '{text}',
  },
};

let current = initialLanguage();

/** The current language code, "en" or "zh". */
export function language() {
  return current;
}

/** The BCP 47 tag used for <html lang> and for formatting dates. */
export function locale() {
  return current === 'zh' ? 'zh-CN' : 'en';
}

/** Translates a key, filling {placeholders} from params; unknown keys show as themselves. */
export function t(key, params = {}) {
  const template = STRINGS[current][key] ?? STRINGS.en[key] ?? key;
  return template.replace(/\{(\w+)\}/g, (whole, name) => (name in params ? String(params[name]) : whole));
}

/** Sets an element's text to a translated string and remembers the key for language switches. */
export function bindText(element, key, params) {
  element.dataset.i18n = key;
  if (params) element.dataset.i18nArgs = JSON.stringify(params);
  else delete element.dataset.i18nArgs;
  element.textContent = t(key, params);
  return element;
}

/** Sets a translated attribute (placeholder, aria-label, title) and remembers its key. */
export function bindAttr(element, attribute, key, params) {
  element.dataset[`i18nAttr${capitalize(attribute.replace(/-(\w)/g, (_, c) => c.toUpperCase()))}`] = JSON.stringify({ attribute, key, params });
  element.setAttribute(attribute, t(key, params));
  return element;
}

/** Shows a unix time (seconds) as a local date and time, re-formatted on language switches. */
export function bindTime(element, unixSeconds) {
  element.dataset.time = String(unixSeconds);
  element.setAttribute('datetime', new Date(unixSeconds * 1000).toISOString());
  element.textContent = formatTime(unixSeconds);
  return element;
}

/** A short local date and time for a unix time in seconds. */
export function formatTime(unixSeconds) {
  const date = new Date(unixSeconds * 1000);
  const today = new Date();
  const sameDay = date.toDateString() === today.toDateString();
  const options = sameDay ? { hour: '2-digit', minute: '2-digit' } : { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' };
  return date.toLocaleString(locale(), options);
}

/** Switches the language, remembers it, and re-translates everything under root. */
export function setLanguage(code, root = document.body) {
  if (!LANGUAGES.includes(code)) return;
  current = code;
  try {
    localStorage.setItem(STORAGE_KEY, code);
  } catch {
    // Private windows may refuse storage; the choice then lasts for this page only.
  }
  document.documentElement.lang = locale();
  translateTree(root);
}

/** Re-applies every remembered translation under root. */
export function translateTree(root) {
  for (const element of root.querySelectorAll('[data-i18n]')) {
    const params = element.dataset.i18nArgs ? JSON.parse(element.dataset.i18nArgs) : undefined;
    element.textContent = t(element.dataset.i18n, params);
  }
  for (const element of root.querySelectorAll('*')) {
    for (const [name, value] of Object.entries(element.dataset)) {
      if (!name.startsWith('i18nAttr')) continue;
      const binding = JSON.parse(value);
      element.setAttribute(binding.attribute, t(binding.key, binding.params));
    }
  }
  for (const element of root.querySelectorAll('[data-time]')) {
    element.textContent = formatTime(Number(element.dataset.time));
  }
}

function initialLanguage() {
  let stored = null;
  try {
    stored = localStorage.getItem(STORAGE_KEY);
  } catch {
    stored = null;
  }
  const code = LANGUAGES.includes(stored) ? stored : (navigator.language || 'en').toLowerCase().startsWith('zh') ? 'zh' : 'en';
  document.documentElement.lang = code === 'zh' ? 'zh-CN' : 'en';
  return code;
}

function capitalize(text) {
  return text.charAt(0).toUpperCase() + text.slice(1);
}
