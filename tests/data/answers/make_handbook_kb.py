#!/usr/bin/env python3
"""Rebuild debian-handbook-en/kb and debian-handbook-zh/kb from the Debian package
debian-handbook 11.20220922 (python3 stdlib only).

    apt-get download debian-handbook            # debian-handbook_11.20220922_all.deb
    dpkg-deb -x debian-handbook_11.20220922_all.deb /tmp/handbook
    python3 tests/data/answers/make_handbook_kb.py \
        /tmp/handbook/usr/share/doc/debian-handbook/html

Each selected section page (sect.NAME.html) becomes NAME.md: headings, paragraphs, list
items and code blocks, with inline code in backticks. For zh-CN, prose paragraphs that
contain no Chinese at all (parts of the book the translators have not translated yet) are
left out. The question sets' gold strings are checked against the output by check_sets.py,
so rerun that after rebuilding.
"""
import os
import re
import sys
from html.parser import HTMLParser

class P(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out=[]; self.buf=[]; self.skip=0; self.stack=[]; self.pre=0; self.list=0
        self.started=False; self.first=False
    def pfx(self):
        if not self.list: return ''
        if self.first:
            return '  '*(self.list-1)+'- '
        return '  '*self.list
    def flush(self, prefix=''):
        t=''.join(self.buf); self.buf=[]
        if self.pre: return
        t=re.sub(r'\s+',' ',t).strip()
        if t:
            self.out.append(prefix+t)
            if self.list: self.first=False
    def handle_starttag(self, tag, a):
        a=dict(a); cls=a.get('class') or ''
        skipme = (tag=='ul' and 'docnav' in cls) or a.get('id') in ('banner','title') or 'indexterm' in cls or tag in ('script','style')
        self.stack.append((tag, skipme))
        if skipme: self.skip+=1; return
        if self.skip: return
        if tag in ('h1','h2','h3','h4','h5'):
            self.flush(); self.buf=[]; self.htag=int(tag[1])
        elif tag=='pre':
            self.flush(); self.pre+=1; self.buf=[]
        elif tag=='li':
            self.flush(); self.list+=1; self.first=True
        elif tag in ('div','p','tr','table','dt','dd'):
            self.flush(self.pfx() if self.list else '')
        elif tag=='br':
            self.buf.append('\n' if self.pre else ' ')
        elif tag=='code' and not self.pre:
            self.buf.append('`')
        elif tag=='td' or tag=='th':
            self.buf.append(' | ')
    def handle_endtag(self, tag):
        # pop until matching
        while self.stack:
            t,s=self.stack.pop()
            if s: self.skip-=1
            if t==tag: break
        if self.skip: return
        if tag in ('h1','h2','h3','h4','h5'):
            t=re.sub(r'\s+',' ',''.join(self.buf)).strip().replace('`',''); self.buf=[]
            if t: self.out.append('#'*(self.htag-1 if self.htag>1 else 1)+' '+t)
        elif tag=='pre':
            t=''.join(self.buf); self.buf=[]; self.pre-=1
            t=t.strip('\n')
            if t.strip(): self.out.append('```\n'+t+'\n```')
        elif tag=='li':
            self.flush(self.pfx()); self.list-=1
        elif tag in ('div','p','tr','table','dt','dd'):
            self.flush(self.pfx() if self.list else ('- ' if tag=='dt' else ''))
        elif tag=='code' and not self.pre:
            self.buf.append('`')
    def handle_data(self, d):
        if self.skip: return
        self.buf.append(d)

def convert(path):
    s=open(path,encoding='utf-8').read()
    i=s.find('<body'); s=s[i:]
    p=P(); p.feed(s); p.flush()
    txt='\n\n'.join(p.out)
    return txt+'\n'


def build(H, lang, secs, out, filter_en=False):
    os.makedirs(out, exist_ok=True)
    total=0; dropped=0
    for s in secs:
        md=convert(f'{H}/{lang}/sect.{s}.html')
        if filter_en:
            blocks=md.split('\n\n'); keep=[]
            for b in blocks:
                if (not b.startswith('```') and not b.startswith('#') and len(b)>60
                    and not re.search(r'[\u4e00-\u9fff]',b) and len(re.findall(r'[a-zA-Z]{4,}',b))>8):
                    dropped+=1; continue
                keep.append(b)
            md='\n\n'.join(keep)
        md=re.sub(r'\n{3,}','\n\n',md).strip()+'\n'
        open(f'{out}/{s}.md','w',encoding='utf-8').write(md)
        total+=len(md.encode())
    print(out, len(secs), total, 'dropped', dropped)
EN=['syslog','task-scheduling-cron-atd','asynchronous-task-scheduling-anacron','backup','quotas','user-group-databases','creating-accounts','hostname-name-service','shell-environment','apt-cache','package-authentication','searching-packages','nfs-file-server','dhcp','domain-name-servers','ipv6','regular-upgrades','automatic-upgrades','setup-apt-package-repository','windows-file-server-with-samba','filesystem-hierarchy','inetd','follow-debian-news','why-debian','rights-management']
ZH=['apt-frontends','backup','common-procedures','dist-upgrade','foundation-documents','hostname-name-service','hotplug','how-to-migrate','manipulating-packages-with-dpkg','network-config','nfs-file-server','regular-upgrades','release-lifecycle','remote-login','user-group-databases','windows-file-server-with-samba','syslog','quotas','asynchronous-task-scheduling-anacron','automatic-upgrades','follow-debian-news','creating-accounts','setup-apt-package-repository','dealing-with-compromised-machine','http-web-server']
A = os.path.dirname(os.path.abspath(__file__))

if __name__ == '__main__':
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    H = sys.argv[1]
    build(H, 'en-US', EN, f'{A}/debian-handbook-en/kb')
    build(H, 'zh-CN', ZH, f'{A}/debian-handbook-zh/kb', filter_en=True)

