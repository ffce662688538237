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
    'timeline.route': '{intent} · {mode} ({source}){flags}',
    'timeline.tool_started': '{name}',
    'timeline.tool_completed': '{name}: {status} — {summary}',
    'timeline.citation': '[{n}] {source}',
    'timeline.confirmation': '{kind} → {target}',
    'run.using_tool': 'Using {name}…',
    'common.yes': 'Yes',
    'common.no': 'No',
    'route.label': 'How Warden handled this message',
    'intent.chat': 'chat',
    'intent.knowledge_question': 'knowledge question',
    'intent.incident_query': 'incident query',
    'intent.diagnostic_start': 'start diagnostic',
    'intent.diagnostic_status': 'diagnostic status',
    'intent.recovery_request': 'recovery request',
    'mode.direct_read': 'direct read',
    'mode.confirmation_required': 'needs confirmation',
    'mode.bounded_react': 'bounded ReAct',
    'mode.clarification': 'clarification',
    'source.rule': 'by rule',
    'source.classifier': 'by classifier',
    'source.fallback': 'fallback',
    'route.incident': 'incident {id}',
    'route.diagnostic': 'diagnostic {id}',
    'route.blocked': 'blocked: {reason}',
    'tool.label': 'Tool calls',
    'tool.status.running': 'running…',
    'tool.status.ok': 'done',
    'tool.status.error': 'error',
    'tool.status.refused': 'refused',
    'tool.status.other': '{status}',
    'citation.sources': 'Sources',
    'citation.panel_label': 'Cited passage',
    'citation.ref_label': 'Source {n}: {title}',
    'citation.close': 'Close the passage',
    'citation.kb': 'Knowledge base',
    'citation.path': 'File',
    'citation.section': 'Section',
    'citation.lines': 'Lines',
    'citation.pages': 'Pages',
    'citation.paragraphs': 'Paragraphs',
    'clarify.label': 'Warden needs more detail',
    'agent.degraded': 'Part of this answer fell back: {reason}',
    'card.incident': 'Incident',
    'card.incident_list': 'Incidents',
    'card.incident_count': '{count} shown',
    'card.no_incidents': 'No incidents match.',
    'card.diagnostic_report': 'Diagnostic report',
    'card.no_report': 'No report yet.',
    'card.safety': 'Safety',
    'card.missing': 'missing',
    'card.not_found_title': 'Not found',
    'card.not_found': 'No {resource} with id {id}.',
    'card.not_found.incident': 'No incident with id {id}.',
    'card.not_found.diagnostic_task': 'No diagnostic task with id {id}.',
    'field.id': 'ID',
    'field.title': 'Title',
    'field.service': 'Service',
    'field.severity': 'Severity',
    'field.status': 'Status',
    'field.starts_at': 'Started',
    'field.ends_at': 'Ended',
    'field.created_at': 'Created',
    'field.updated_at': 'Updated',
    'field.fingerprint': 'Fingerprint',
    'field.labels': 'Labels',
    'field.annotations': 'Annotations',
    'field.incident_id': 'Incident',
    'field.run_id': 'Run',
    'field.component': 'Component',
    'field.mechanism': 'Mechanism',
    'field.recoveryMode': 'Recovery mode',
    'field.executionPermitted': 'Execution permitted',
    'field.humanApprovalRequired': 'Human approval required',
    'field.validatorStatus': 'Validator status',
    'field.evidenceIds': 'Evidence',
    'field.target': 'Target',
    'field.reason': 'Reason',
    'field.parameters': 'Exact parameters',
    'field.expires_at': 'Expires',
    'action.needs_confirmation': 'Needs your confirmation',
    'action.kind.diagnostic_start': 'Start a diagnostic',
    'action.kind.recovery_request': 'Approve a recovery',
    'action.confirm': 'Confirm',
    'action.reject': 'Reject',
    'action.confirming': 'Confirming…',
    'action.rejecting': 'Rejecting…',
    'action.status.pending': 'pending',
    'action.status.confirmed': 'approved',
    'action.status.executed': 'executed',
    'action.status.rejected': 'rejected',
    'action.status.expired': 'expired',
    'action.status.failed': 'failed',
    'action.status.other': '{status}',
    'action.result.diagnostic': 'Diagnostic task {id} started ({status}).',
    'action.result.executed': 'Confirmed and carried out.',
    'action.result.approval': 'Recovery approved as {id}. Nothing runs automatically.',
    'action.result.confirmed': 'Approved.',
    'action.result.rejected': 'Rejected. Nothing was done.',
    'action.result.expired': 'This request expired before anyone decided.',
    'action.result.failed': 'Could not be carried out: {error}',
    'action.error.forbidden': 'Not allowed: this needs an operator or admin.',
    'action.error.conflict': 'Already decided, expired or being decided: {message}',
    'action.error.changed': 'The parameters changed since this was proposed. Nothing was done.',
    'action.error.not_found': 'This action does not exist any more.',
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
    'timeline.route': '{intent} · {mode}（{source}）{flags}',
    'timeline.tool_started': '{name}',
    'timeline.tool_completed': '{name}：{status} — {summary}',
    'timeline.citation': '[{n}] {source}',
    'timeline.confirmation': '{kind} → {target}',
    'run.using_tool': '正在使用 {name}…',
    'common.yes': '是',
    'common.no': '否',
    'route.label': 'Warden 如何处理这条消息',
    'intent.chat': '闲聊',
    'intent.knowledge_question': '知识问答',
    'intent.incident_query': '事件查询',
    'intent.diagnostic_start': '发起诊断',
    'intent.diagnostic_status': '诊断状态',
    'intent.recovery_request': '恢复请求',
    'mode.direct_read': '直接读取',
    'mode.confirmation_required': '需要确认',
    'mode.bounded_react': '有界 ReAct',
    'mode.clarification': '澄清',
    'source.rule': '规则判定',
    'source.classifier': '分类器判定',
    'source.fallback': '兜底',
    'route.incident': '事件 {id}',
    'route.diagnostic': '诊断 {id}',
    'route.blocked': '已拦截：{reason}',
    'tool.label': '工具调用',
    'tool.status.running': '运行中…',
    'tool.status.ok': '完成',
    'tool.status.error': '出错',
    'tool.status.refused': '已拒绝',
    'tool.status.other': '{status}',
    'citation.sources': '引用来源',
    'citation.panel_label': '引用的段落',
    'citation.ref_label': '来源 {n}：{title}',
    'citation.close': '关闭段落',
    'citation.kb': '知识库',
    'citation.path': '文件',
    'citation.section': '章节',
    'citation.lines': '行',
    'citation.pages': '页',
    'citation.paragraphs': '段落',
    'clarify.label': 'Warden 需要更多信息',
    'agent.degraded': '此回答的部分内容已降级：{reason}',
    'card.incident': '事件',
    'card.incident_list': '事件列表',
    'card.incident_count': '显示 {count} 个',
    'card.no_incidents': '没有符合条件的事件。',
    'card.diagnostic_report': '诊断报告',
    'card.no_report': '尚无报告。',
    'card.safety': '安全',
    'card.missing': '缺失',
    'card.not_found_title': '未找到',
    'card.not_found': '未找到 ID 为 {id} 的{resource}。',
    'card.not_found.incident': '未找到 ID 为 {id} 的事件。',
    'card.not_found.diagnostic_task': '未找到 ID 为 {id} 的诊断任务。',
    'field.id': 'ID',
    'field.title': '标题',
    'field.service': '服务',
    'field.severity': '级别',
    'field.status': '状态',
    'field.starts_at': '开始时间',
    'field.ends_at': '结束时间',
    'field.created_at': '创建时间',
    'field.updated_at': '更新时间',
    'field.fingerprint': '指纹',
    'field.labels': '标签',
    'field.annotations': '注解',
    'field.incident_id': '事件',
    'field.run_id': '运行',
    'field.component': '组件',
    'field.mechanism': '机制',
    'field.recoveryMode': '恢复方式',
    'field.executionPermitted': '允许执行',
    'field.humanApprovalRequired': '需要人工批准',
    'field.validatorStatus': '校验状态',
    'field.evidenceIds': '证据',
    'field.target': '目标',
    'field.reason': '原因',
    'field.parameters': '确切参数',
    'field.expires_at': '过期时间',
    'action.needs_confirmation': '需要你确认',
    'action.kind.diagnostic_start': '发起诊断',
    'action.kind.recovery_request': '批准恢复',
    'action.confirm': '确认',
    'action.reject': '拒绝',
    'action.confirming': '正在确认…',
    'action.rejecting': '正在拒绝…',
    'action.status.pending': '待确认',
    'action.status.confirmed': '已批准',
    'action.status.executed': '已执行',
    'action.status.rejected': '已拒绝',
    'action.status.expired': '已过期',
    'action.status.failed': '失败',
    'action.status.other': '{status}',
    'action.result.diagnostic': '诊断任务 {id} 已启动（{status}）。',
    'action.result.executed': '已确认并执行。',
    'action.result.approval': '恢复已批准，批准编号 {id}。不会自动执行任何操作。',
    'action.result.confirmed': '已批准。',
    'action.result.rejected': '已拒绝，未执行任何操作。',
    'action.result.expired': '此请求在做出决定前已过期。',
    'action.result.failed': '无法执行：{error}',
    'action.error.forbidden': '无权操作：需要操作员或管理员。',
    'action.error.conflict': '已被决定、已过期或正在处理：{message}',
    'action.error.changed': '参数自提出后已更改，未执行任何操作。',
    'action.error.not_found': '此操作已不存在。',
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

/** Whether a key has a translation (callers fall back to showing a raw value otherwise). */
export function hasTranslation(key) {
  return Object.hasOwn(STRINGS.en, key);
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
